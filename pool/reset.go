package pool

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/metrics"
	"github.com/gvxrun/gvx/pool/client"
	"github.com/gvxrun/gvx/sandbox"
)

// takeBack answers a task's Return: it counts the outcome and, for a
// sandbox its task reset and verified, takes it back as ready if it is
// this pool's, claimed by that task, alive and under pool.max_uses. It
// reports whether it did; if not, the sandbox stays the task's (which
// destroys it).
//
// Ownership passes with the claimed marker: it names the task while the
// task owns the sandbox, and the server removes it only once the sandbox
// is on its ready list (under the lock drain takes the list with). A
// crash of either side midway leaves the sandbox with one owner: the task
// while the marker names it (its release destroys it), the server once
// the marker is gone (a restarted server's removeStale destroys what a
// dead one had ready).
func (s *Server) takeBack(ctx context.Context, r *client.Return) bool {
	t0 := time.Now().Add(-time.Duration(r.Seconds * float64(time.Second)))
	if r.Failed != "" {
		s.Metrics.Reset(r.Failed)
		s.Metrics.Observe(metrics.OpReset, t0, fmt.Errorf("%s: %s", r.Failed, r.Detail))
		log.G(ctx).Infof("gvx pool: %s not reset (%s): %s; its task destroys it", r.ID, r.Failed, r.Detail)
		return false
	}
	sb, err := s.returned(r)
	if err != nil {
		s.Metrics.Reset(metrics.ResetRefused)
		s.Metrics.Observe(metrics.OpReset, t0, err)
		log.G(ctx).WithError(err).Warnf("gvx pool: not taking %s back; its task destroys it", r.ID)
		return false
	}
	s.Metrics.Reset(metrics.ResetOK)
	s.Metrics.Observe(metrics.OpReset, t0, nil)
	log.G(ctx).Debugf("gvx pool: %s reset after use %d, ready again", sb.ID, sb.Uses)
	s.wakeFill()
	return true
}

// returned checks a reset sandbox and puts it on the ready list.
func (s *Server) returned(r *client.Return) (*sandbox.Sandbox, error) {
	if !s.cfg.Pool.Reset {
		return nil, fmt.Errorf("pool.reset is off")
	}
	if !strings.HasPrefix(r.ID, api.PoolSandboxPrefix) || strings.ContainsAny(r.ID, "/.") {
		return nil, fmt.Errorf("no sandbox %q in %s", r.ID, s.cfg.PoolDir())
	}
	d := s.cfg.PoolDir().Sandbox(r.ID)
	sb, err := sandbox.Load(d.Record())
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", r.ID, err)
	}
	owner, err := os.ReadFile(d.Claimed())
	switch {
	case err != nil:
		return nil, fmt.Errorf("sandbox %s is not claimed: %w", r.ID, err)
	case string(owner) != r.Owner:
		return nil, fmt.Errorf("sandbox %s is claimed by %q, not %q", r.ID, owner, r.Owner)
	case sb.Pool == nil || sb.Pool.Class != s.class:
		return nil, fmt.Errorf("sandbox %s is not of class %s", r.ID, s.class)
	case sb.Baseline == nil:
		return nil, fmt.Errorf("sandbox %s has no baseline", r.ID)
	case !sb.Alive():
		return nil, fmt.Errorf("sandbox %s is not running", r.ID)
	}
	sb.Uses++
	if sb.Uses >= s.cfg.Pool.Uses() {
		return nil, fmt.Errorf("sandbox %s served %d tasks (pool.max_uses %d)", r.ID, sb.Uses, s.cfg.Pool.Uses())
	}
	if err := sb.Save(d.Record()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil, fmt.Errorf("the pool server is stopping")
	}
	if err := os.Remove(d.Claimed()); err != nil {
		return nil, fmt.Errorf("unmark %s: %w", r.ID, err)
	}
	s.ready = append(s.ready, sb)
	s.reset++
	return sb, nil
}
