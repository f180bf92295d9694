package pool

import (
	"context"
	"errors"
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

// takeBack answers a task's Return. A sandbox whose task could not
// release it cleanly (Failed) is only counted: it stays the task's, which
// destroys it. Otherwise, if the sandbox is this pool's, claimed by that
// task, alive and under pool.max_uses, the server takes it over and
// reports true; it then restores and verifies it in the background
// (verify) and puts it back on the ready list, or destroys it.
//
// Ownership passes with the claimed marker: it names the task while the
// task owns the sandbox; the server removes it when it takes the sandbox
// over (under the lock drain takes the ready list with). A crash of either
// side midway leaves the sandbox with one owner: the task while the marker
// names it (its release destroys it), the server once the marker is gone
// (a restarted server's removeStale destroys what a dead one had).
func (s *Server) takeBack(ctx context.Context, r *client.Return) bool {
	t0 := time.Now().Add(-time.Duration(r.Seconds * float64(time.Second)))
	if r.Failed != "" {
		s.Metrics.Reset(r.Failed)
		s.Metrics.Observe(metrics.OpReset, t0, fmt.Errorf("%s: %s", r.Failed, r.Detail))
		log.G(ctx).Infof("gvx pool: %s not reset (%s): %s; its task destroys it", r.ID, r.Failed, r.Detail)
		return false
	}
	sb, err := s.takeOver(r)
	if err != nil {
		s.Metrics.Reset(metrics.ResetRefused)
		s.Metrics.Observe(metrics.OpReset, t0, err)
		log.G(ctx).WithError(err).Warnf("gvx pool: not taking %s back; its task destroys it", r.ID)
		return false
	}
	go s.verify(ctx, sb, t0)
	return true
}

// takeOver checks a returned sandbox and makes it the server's.
func (s *Server) takeOver(r *client.Return) (*sandbox.Sandbox, error) {
	if !s.cfg.Pool.Reset {
		return nil, errors.New("pool.reset is off")
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
	case sb.Uses+1 >= s.cfg.Pool.Uses():
		return nil, fmt.Errorf("sandbox %s served %d tasks (pool.max_uses %d)", r.ID, sb.Uses+1, s.cfg.Pool.Uses())
	case !sb.Alive():
		return nil, fmt.Errorf("sandbox %s is not running", r.ID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil, errors.New("the pool server is stopping")
	}
	if err := os.Remove(d.Claimed()); err != nil {
		return nil, fmt.Errorf("unmark %s: %w", r.ID, err)
	}
	s.resetting++
	s.verifies.Add(1)
	return sb, nil
}

// verify restores the guest state a task may have changed in a sandbox
// the server took back, checks it against the sandbox's boot baseline
// (sandbox.Probe, Verify) and puts it on the ready list, or destroys it
// and counts why. t0 is when its task's delete began the reset.
func (s *Server) verify(ctx context.Context, sb *sandbox.Sandbox, t0 time.Time) {
	defer s.verifies.Done()
	var st *api.GuestState
	var err error
	if s.cfg.Pool.Lease {
		st, err = s.resetLease(ctx, sb)
	} else {
		st, err = sb.Probe(ctx, true)
	}
	switch {
	case err != nil:
		err = &sandbox.ResetError{Reason: sandbox.ResetProbe, Detail: err.Error()}
	case s.cfg.Pool.Lease:
		// A lease changes nothing on the host (sandbox.VerifyGuest).
		err = sb.VerifyGuest(st)
	default:
		err = sb.Verify(st)
	}
	if err == nil && s.cfg.Network == api.NetworkNAT {
		// The task may have narrowed the NAT's policy (gvx serve's
		// updateNetwork, Sandbox.NarrowEgress): the next one gets the
		// pool's.
		if nerr := api.SetNATNarrow(ctx, sb.Root.NATControl(sb.ID), nil); nerr != nil {
			err = &sandbox.ResetError{Reason: sandbox.ResetNetwork, Detail: nerr.Error()}
		}
	}
	if err == nil {
		sb.Uses++
		if !s.cfg.Pool.Lease {
			// A lease pool's sandboxes are only ever the server's:
			// their uses are counted in its memory, no file written.
			err = sb.Save(api.SandboxDir(sb.Dir).Record())
		}
	}
	s.mu.Lock()
	s.resetting--
	ok := err == nil && !s.stopping
	if ok {
		s.ready = append(s.ready, sb)
		s.readiedLocked()
		s.reset++
	}
	s.mu.Unlock()
	s.wakeFill()
	if ok {
		s.Metrics.Reset(metrics.ResetOK)
		s.Metrics.Observe(metrics.OpReset, t0, nil)
		log.G(ctx).Debugf("gvx pool: %s reset after use %d (guest %d KiB, %d KiB at boot), ready again", sb.ID, sb.Uses, st.MemUsedKiB, sb.Baseline.Guest.MemUsedKiB)
		return
	}
	reason := metrics.ResetRefused // the server stopped meanwhile
	var re *sandbox.ResetError
	if errors.As(err, &re) {
		reason = re.Reason
	}
	s.Metrics.Reset(reason)
	s.Metrics.Observe(metrics.OpReset, t0, err)
	if err != nil {
		log.G(ctx).Infof("gvx pool: %s not reset (%s): %v; destroying it", sb.ID, reason, err)
	}
	d0 := time.Now()
	s.dropAgent(sb.ID)
	s.Metrics.Observe(metrics.OpDestroy, d0, sb.Destroy(context.WithoutCancel(ctx), s.sentry))
}
