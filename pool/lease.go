package pool

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/metrics"
	"github.com/gvxrun/gvx/pool/client"
	"github.com/gvxrun/gvx/sandbox"
)

// serveLease answers a lease request (pool.lease): it hands a ready
// sandbox out and holds it for the lease until the client releases it or
// its connection ends (the client's program died, or drain closed it);
// then it resets the sandbox (verify, with the lease root ended and
// stacked again: resetLease) or destroys it, and answers whether it did.
// A leased sandbox stays the server's (no claimed marker: no file is
// written for a lease): a server that finds it at its start destroys it
// as it does the ready ones, and so does the janitor once no server
// answers for its pool.
func (s *Server) serveLease(ctx context.Context, conn net.Conn, r *bufio.Reader, owner string) {
	enc := json.NewEncoder(conn)
	if !s.cfg.Pool.Lease {
		_ = enc.Encode(client.Response{Error: fmt.Sprintf("pool %s does not serve leases: set [pool] lease = true in its config", s.cfg.PoolSocket()), Code: client.CodeBadRequest})
		return
	}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		_ = enc.Encode(client.Response{Error: "the pool server is stopping", Code: client.CodeNoSandbox})
		return
	}
	s.leases[conn] = struct{}{}
	s.leasing.Add(1)
	s.mu.Unlock()
	defer s.leasing.Done()
	defer func() {
		s.mu.Lock()
		delete(s.leases, conn)
		s.mu.Unlock()
	}()

	conn.SetDeadline(time.Now().Add(leaseWait + 10*time.Second))
	sb, err := s.claimWaiting(ctx)
	s.Metrics.Claim(s.cfg.PoolSocket(), err == nil)
	if err != nil {
		resp := client.Response{Error: err.Error(), Code: client.CodeInternal}
		if ce, ok := err.(*claimError); ok {
			resp.Code = ce.code
		}
		_ = enc.Encode(resp)
		return
	}
	t0 := time.Now()
	if err := enc.Encode(client.Response{Sandbox: sb}); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx pool: lease of %s to %s not delivered", sb.ID, owner)
		s.endLease(ctx, sb, t0)
		return
	}
	log.G(ctx).Debugf("gvx pool: leased out %s (use %d) to %s", sb.ID, sb.Uses+1, owner)
	// Held until a Release or the connection's end, whichever comes.
	conn.SetDeadline(time.Time{})
	var req client.Request
	_ = json.NewDecoder(r).Decode(&req)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	_ = enc.Encode(client.Response{Returned: s.endLease(ctx, sb, t0)})
}

// leaseWait bounds how long a lease waits for a ready sandbox.
const leaseWait = 30 * time.Second

// claimWaiting claims a ready sandbox for a lease, waiting for one (up
// to leaseWait) while every sandbox is out, being reset or booting: the
// lease is answered as soon as one is ready, not at its next poll.
func (s *Server) claimWaiting(ctx context.Context) (*sandbox.Sandbox, error) {
	deadline := time.NewTimer(leaseWait)
	defer deadline.Stop()
	for again := false; ; again = true {
		s.mu.Lock()
		readied, stopping := s.readied, s.stopping
		s.mu.Unlock()
		if stopping {
			return nil, &claimError{client.CodeNoSandbox, "the pool server is stopping"}
		}
		sb, err := s.claimAgain(s.class, "", again)
		var ce *claimError
		if !errors.As(err, &ce) || ce.code != client.CodeNoSandbox {
			return sb, err
		}
		select {
		case <-readied:
		case <-deadline.C:
			return nil, err
		case <-ctx.Done():
			return nil, err
		}
	}
}

// readiedLocked wakes the leases waiting for a ready sandbox (s.mu held).
func (s *Server) readiedLocked() {
	close(s.readied)
	s.readied = make(chan struct{})
}

// endLease starts the reset of a leased sandbox in the background, or
// destroys it (pool.reset off, pool.max_uses reached, no baseline, the
// server stopping, the sandbox dead).
func (s *Server) endLease(ctx context.Context, sb *sandbox.Sandbox, t0 time.Time) bool {
	var why string
	s.mu.Lock()
	switch {
	case s.stopping:
		why = "the pool server is stopping"
	case !s.cfg.Pool.Reset:
		why = "pool.reset is off"
	case sb.Baseline == nil:
		why = "no baseline"
	case sb.Uses+1 >= s.cfg.Pool.Uses():
		why = fmt.Sprintf("served %d leases (pool.max_uses %d)", sb.Uses+1, s.cfg.Pool.Uses())
	case !sb.Alive():
		why = "not running"
	default:
		s.resetting++
		s.verifies.Add(1)
	}
	s.mu.Unlock()
	if why == "" {
		go s.verify(ctx, sb, time.Now())
		return true
	}
	s.Metrics.Reset(metrics.ResetRefused)
	s.Metrics.Observe(metrics.OpReset, t0, errors.New(why))
	log.G(ctx).Infof("gvx pool: lease of %s ended, not reset (%s); destroying it", sb.ID, why)
	d0 := time.Now()
	s.dropAgent(sb.ID)
	s.Metrics.Observe(metrics.OpDestroy, d0, sb.Destroy(context.WithoutCancel(ctx), s.sentry))
	return false
}

// endLeases closes the connections of the leases out (drain: their
// sandboxes are destroyed) and waits for them.
func (s *Server) endLeases() {
	s.mu.Lock()
	for c := range s.leases {
		c.Close()
	}
	s.mu.Unlock()
	s.leasing.Wait()
}
