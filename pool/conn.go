package pool

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/pool/client"
	"github.com/gvxrun/gvx/sandbox"
)

// claimError is a claim refused with a protocol code.
type claimError struct {
	code client.Code
	msg  string
}

func (e *claimError) Error() string { return e.msg }

func (s *Server) status() *client.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &client.Status{Class: s.class, Image: s.cfg.Pool.Image, Size: s.cfg.Pool.Size, Target: s.targetLocked(), Ready: len(s.ready), Booted: s.booted, Claimed: s.claimed, Reset: s.reset}
}

// serveConn answers one request (package client's protocol).
func (s *Server) serveConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var req client.Request
	r := bufio.NewReader(conn)
	dec := json.NewDecoder(r)
	if err := dec.Decode(&req); err != nil {
		_ = json.NewEncoder(conn).Encode(client.Response{Error: fmt.Sprintf("bad claim: %v", err), Code: client.CodeBadRequest})
		return
	}
	if req.Status {
		_ = json.NewEncoder(conn).Encode(client.Response{Status: s.status()})
		return
	}
	if req.Return != nil {
		_ = json.NewEncoder(conn).Encode(client.Response{Returned: s.takeBack(ctx, req.Return)})
		return
	}
	if req.Lease {
		// What the decoder read ahead, then the connection.
		s.serveLease(ctx, conn, bufio.NewReader(io.MultiReader(dec.Buffered(), r)), req.Owner)
		return
	}
	if s.cfg.Pool.Lease {
		_ = json.NewEncoder(conn).Encode(client.Response{Error: fmt.Sprintf("pool %s serves leases only (pool.lease): tasks boot their own sandbox", s.cfg.PoolSocket()), Code: client.CodeNoSandbox})
		return
	}
	sb, err := s.claim(req.Class, req.Owner)
	s.Metrics.Claim(s.cfg.PoolSocket(), err == nil)
	if err != nil {
		resp := client.Response{Error: err.Error(), Code: client.CodeInternal}
		if ce, ok := err.(*claimError); ok {
			resp.Code = ce.code
		}
		_ = json.NewEncoder(conn).Encode(resp)
		return
	}
	if err := json.NewEncoder(conn).Encode(client.Response{Sandbox: sb}); err != nil {
		// The shim is gone: the sandbox is nobody's, destroy it.
		log.G(ctx).WithError(err).Warnf("gvx pool: claim of %s not delivered; destroying it", sb.ID)
		_ = sb.Destroy(ctx, s.sentry)
		return
	}
	log.G(ctx).Debugf("gvx pool: handed out %s (use %d)", sb.ID, sb.Uses+1)
}

// claim takes the last reset (else the oldest booted) live ready sandbox
// of the class and marks it as owner's (the claimed marker names it); a
// lease's (owner empty) is not marked: it stays the server's.
func (s *Server) claim(class, owner string) (*sandbox.Sandbox, error) {
	return s.claimAgain(class, owner, false)
}

// claimAgain is claim; again: a lease trying again after it waited,
// whose first try counted in the demand already.
func (s *Server) claimAgain(class, owner string, again bool) (*sandbox.Sandbox, error) {
	if class != s.class {
		return nil, &claimError{client.CodeNoSandbox, fmt.Sprintf("the pool boots class %s, the task wants %s (its gvx config differs from the pool's)", s.class, class)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.wakeFill()
	for len(s.ready) > 0 {
		// From the back: a sandbox just reset (its Sentry's caches
		// warm) before a fresh boot (bootOne puts those at the front).
		sb := s.ready[len(s.ready)-1]
		s.ready = s.ready[:len(s.ready)-1]
		if !sb.Alive() {
			continue // pruneDead cleans it up
		}
		if owner != "" {
			if err := os.WriteFile(api.SandboxDir(sb.Dir).Claimed(), []byte(owner), 0o600); err != nil {
				return nil, fmt.Errorf("mark %s claimed: %w", sb.ID, err)
			}
		}
		s.noteClaim(time.Now())
		s.claimed++
		return sb, nil
	}
	if !again {
		s.noteClaim(time.Now()) // demand all the same
	}
	return nil, &claimError{client.CodeNoSandbox, fmt.Sprintf("all %d handed out, refilling", s.targetLocked())}
}

// wakeFill tells fill to look at the pool again.
func (s *Server) wakeFill() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
