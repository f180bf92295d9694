package pool

import (
	"context"
	"time"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/metrics"
	"github.com/gvxrun/gvx/sandbox"
)

// fill keeps the pool at its target depth (target), booting up to
// pool.boot_concurrency sandboxes at once; after a failed boot it waits
// (1 s, doubling to 30 s) before the next. While at least half the target
// is ready it defers refills until claims pause for refillDelay: a boot
// takes a CPU for ~100 ms and, on cgroup v1, the kernel's cgroup locks,
// which would slow the tasks being adopted at that moment; below half,
// under sustained demand, it boots at once.
func (s *Server) fill(ctx context.Context) {
	tick := time.NewTicker(time.Second) // the demand, and so the target, moves with time
	defer tick.Stop()
	defer s.boots.Wait()
	var pruned time.Time
	for {
		// Not at every wake (each claim and reset wakes it): a dead
		// ready sandbox is skipped by claims anyway.
		if time.Since(pruned) >= pruneEvery {
			s.pruneDead(ctx)
			pruned = time.Now()
		}
		s.mu.Lock()
		n, target := 0, s.targetLocked()
		var deferred <-chan time.Time
		quiet := refillDelay
		if len(s.claims) > 0 {
			quiet = time.Since(s.claims[len(s.claims)-1])
		}
		switch {
		case time.Now().Before(s.retryAt):
		case 2*len(s.ready) >= target && quiet < refillDelay && len(s.ready) < target:
			deferred = time.After(refillDelay - quiet)
		default:
			// Sandboxes being reset count as good as booting.
			n = min(target-len(s.ready)-s.booting-s.resetting, s.cfg.Pool.BootConcurrency-s.booting)
		}
		s.booting += max(n, 0)
		s.mu.Unlock()
		for range n {
			s.boots.Add(1)
			go func() {
				defer s.boots.Done()
				s.bootOne(ctx)
				s.wakeFill()
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-tick.C:
		case <-deferred:
		}
	}
}

// pruneEvery is how often fill looks for dead ready sandboxes at most.
const pruneEvery = 200 * time.Millisecond

// refillDelay is how long claims must pause before a pool at least half
// full refills.
const refillDelay = 250 * time.Millisecond

// bootOne boots a sandbox into the pool, or schedules the retry.
func (s *Server) bootOne(ctx context.Context) {
	t0 := time.Now()
	sb, err := s.boot(ctx)
	took := time.Since(t0)
	s.Metrics.Observe(metrics.OpBoot, t0, err)
	s.mu.Lock()
	s.booting--
	if err != nil {
		s.retryAt = time.Now().Add(s.backoff)
		backoff := s.backoff
		s.backoff = min(2*s.backoff, 30*time.Second)
		s.mu.Unlock()
		if ctx.Err() == nil {
			log.G(ctx).WithError(err).Errorf("gvx pool: boot failed; retrying in %s", backoff)
		}
		return
	}
	s.backoff = time.Second
	// At the front: claims take reset sandboxes (at the back) first.
	s.ready = append([]*sandbox.Sandbox{sb}, s.ready...)
	s.readiedLocked()
	s.booted++
	// The boot time the target reckons with: a moving average.
	if s.bootTime == 0 {
		s.bootTime = took
	} else {
		s.bootTime = (3*s.bootTime + took) / 4
	}
	n, booted, target := len(s.ready), s.booted, s.targetLocked()
	s.mu.Unlock()
	log.G(ctx).Infof("gvx pool: booted %s in %s (%d/%d ready, %d booted)", sb.ID, took.Round(time.Millisecond), n, target, booted)
}

// pruneDead destroys ready sandboxes whose process is gone.
func (s *Server) pruneDead(ctx context.Context) {
	s.mu.Lock()
	var dead []*sandbox.Sandbox
	live := s.ready[:0]
	for _, sb := range s.ready {
		if sb.Alive() {
			live = append(live, sb)
		} else {
			dead = append(dead, sb)
		}
	}
	s.ready = live
	s.mu.Unlock()
	for _, sb := range dead {
		log.G(ctx).Warnf("gvx pool: ready sandbox %s died; replacing it", sb.ID)
		t0 := time.Now()
		s.dropAgent(sb.ID)
		s.Metrics.Observe(metrics.OpDestroy, t0, sb.Destroy(ctx, s.sentry))
	}
}
