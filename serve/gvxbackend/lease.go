package gvxbackend

import (
	"context"
	"net"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/serve/backend"
)

// leaseSandbox is a sandbox of a lease template: a lease of its pool
// (gvx.Lease), held until Close hands it back. Its commands start through
// the sandbox's control socket, with the create's env before their own.
// It is not Identified: the service's id is its only one, and a later
// service cannot Attach it (the lease ends with this process).
type leaseSandbox struct {
	l   *gvx.Lease
	env []string
	cpuMeter
}

// leaseOf leases a sandbox of lease pool p for a create with options o.
func leaseOf(ctx context.Context, p *gvx.Pool, o backend.CreateOptions) (*leaseSandbox, error) {
	l, err := p.Lease(ctx)
	if err != nil {
		return nil, err
	}
	s := &leaseSandbox{l: l, env: o.Env}
	if o.Narrow != nil {
		if err := s.NarrowEgress(ctx, o.Narrow); err != nil {
			_ = l.Release(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return s, nil
}

func (s *leaseSandbox) Exec(ctx context.Context, c backend.Cmd) (backend.Process, error) {
	p, err := s.l.Start(ctx, c.Args, execOptions(c, s.env))
	if err != nil {
		return nil, err
	}
	return &process{p: p}, nil
}

func (s *leaseSandbox) Pause(ctx context.Context) error  { return s.l.Pause(ctx) }
func (s *leaseSandbox) Resume(ctx context.Context) error { return s.l.Resume(ctx) }

// Close hands the sandbox back to its pool, which resets it for the next
// create.
func (s *leaseSandbox) Close(ctx context.Context) error { return s.l.Release(ctx) }

func (s *leaseSandbox) Stats(ctx context.Context) (backend.Stats, error) {
	st, err := s.l.Stats(ctx)
	if err != nil {
		return backend.Stats{}, err
	}
	return s.measure(st), nil
}

// DialPort connects to the guest's TCP port through the sandbox's NAT.
func (s *leaseSandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	return s.l.DialPort(ctx, port)
}

// NarrowEgress replaces the narrowing of the sandbox's NAT's policy (the
// pool's reset takes it off).
func (s *leaseSandbox) NarrowEgress(ctx context.Context, n *api.Narrow) error {
	return narrow(ctx, s.l, n)
}
