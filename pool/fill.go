package pool

import (
	"context"
	"time"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/sandbox"
)

// fill keeps Size sandboxes ready, booting one at a time.
func (s *Server) fill(ctx context.Context) {
	backoff := time.Second
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		s.pruneDead(ctx)
		s.mu.Lock()
		need := len(s.ready) < s.cfg.Pool.Size
		s.mu.Unlock()
		if need {
			s.settle(ctx)
			if ctx.Err() != nil {
				return
			}
			t0 := time.Now()
			sb, err := s.boot(ctx)
			s.mu.Lock()
			if err == nil {
				s.ready = append(s.ready, sb)
				s.booted++
			}
			n, booted := len(s.ready), s.booted
			s.mu.Unlock()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				log.G(ctx).WithError(err).Errorf("gvx pool: boot failed; retrying in %s", backoff)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 30*time.Second)
				continue
			}
			backoff = time.Second
			log.G(ctx).Infof("gvx pool: booted %s in %s (%d/%d ready, %d booted)", sb.ID, time.Since(t0).Round(time.Millisecond), n, s.cfg.Pool.Size, booted)
			if ctx.Err() != nil {
				return
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-tick.C:
		}
	}
}

// settle defers a refill until claims pause for refillDelay (or the pool
// runs dry): booting a sandbox takes a CPU for ~100 ms and, on cgroup v1,
// the kernel's cgroup locks, which would slow the tasks being adopted at
// that moment.
func (s *Server) settle(ctx context.Context) {
	for {
		s.mu.Lock()
		empty, quiet := len(s.ready) == 0, time.Since(s.lastClaim)
		s.mu.Unlock()
		if empty || quiet >= refillDelay {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(refillDelay - quiet):
		}
	}
}

// refillDelay is how long claims must pause before the pool refills.
const refillDelay = 250 * time.Millisecond

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
		_ = sb.Destroy(ctx, s.sentry)
	}
}
