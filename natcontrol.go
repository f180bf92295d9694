package gvx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"

	"github.com/containerd/containerd/v2/client"

	"github.com/gvxrun/gvx/api"
)

// NarrowEgress replaces the narrowing of a NetworkNAT sandbox's egress
// policy while it runs (what NAT.NarrowDefault, NarrowAllow and
// NarrowDeny set at New; all empty: none, the policy as configured). Its
// NAT decides new flows by it at once; connections already open are
// left alone. The container's spec carries it on, so a checkpoint taken
// afterwards keeps it. A sandbox without a NAT is ErrUnsupported.
func (s *Sandbox) NarrowEgress(ctx context.Context, def string, allow, deny []string) error {
	n, err := narrowing(def, allow, deny)
	if err != nil {
		return newError("narrow egress", s.id, ErrInvalid, err)
	}
	ctx = s.c.Context(ctx)
	cont, sock, err := s.natControl("narrow egress")
	if err != nil {
		return err
	}
	spec, err := cont.Spec(ctx)
	if err != nil {
		return newError("narrow egress", s.id, nil, err)
	}
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	nat := api.NAT{}
	if v, ok := spec.Annotations[api.AnnotationNAT]; ok {
		if nat, err = api.DecodeNAT(v); err != nil {
			return newError("narrow egress", s.id, nil, err)
		}
	}
	var cur *api.Narrow
	if nat.Egress != nil {
		cur = nat.Egress.Narrow
	}
	if sameNarrow(cur, n) {
		return nil // the NAT started with it (New, a restore) or was given it
	}
	switch {
	case nat.Egress != nil:
		nat.Egress.Narrow = n
		if !nat.Egress.HasPolicy() && n == nil {
			nat.Egress = nil
		}
	case n != nil:
		nat.Egress = &api.Egress{Narrow: n}
	}
	if err := api.SetNATNarrow(ctx, sock, n); err != nil {
		return newError("narrow egress", s.id, nil, err)
	}
	enc, err := api.EncodeNAT(nat)
	if err == nil {
		spec.Annotations[api.AnnotationNAT] = enc
		err = cont.Update(ctx, client.UpdateContainerOpts(client.WithSpec(spec)))
	}
	if err != nil {
		return newError("narrow egress", s.id, nil, fmt.Errorf("the NAT has it, but the container's spec (what a checkpoint keeps) does not: %w", err))
	}
	return nil
}

// narrowing is the narrowing of NarrowEgress's arguments, checked (nil:
// none, all empty).
func narrowing(def string, allow, deny []string) (*api.Narrow, error) {
	if def == "" && allow == nil && deny == nil {
		return nil, nil
	}
	n := &api.Narrow{Default: def, Allow: allow, Deny: deny}
	if err := n.Check(); err != nil {
		return nil, err
	}
	return n, nil
}

// natControl is the sandbox's current container and its NAT's control
// socket, for operation op.
func (s *Sandbox) natControl(op string) (client.Container, string, error) {
	s.bmu.Lock()
	cont := s.container
	s.bmu.Unlock()
	if cont == nil || s.curTask() == nil {
		return nil, "", newError(op, s.id, ErrNotRunning, nil)
	}
	// The NAT's control socket is in the sentry root of the sandbox the
	// container runs in (a pool's, for an adopted one: the root is a
	// link to it).
	root := api.SentryRoot(filepath.Join(api.Layout{Dir: s.c.cfg.StateDir}.SentryRoot(cont.ID()), s.c.opts.Namespace))
	sock, err := root.FindNATControl()
	if err != nil {
		return nil, "", errorf(op, s.id, ErrUnsupported, "the sandbox has no NAT (%v): create it with Network %q", err, NetworkNAT)
	}
	return cont, sock, nil
}

// Network is the running sandbox's network: NetworkNAT when it runs
// behind a NAT of its own (or a pool sandbox's it adopted), else
// NetworkNone.
func (s *Sandbox) Network(ctx context.Context) (NetworkMode, error) {
	_, _, err := s.natControl("network")
	switch {
	case err == nil:
		return NetworkNAT, nil
	case errors.Is(err, ErrUnsupported):
		return NetworkNone, nil
	}
	return "", err
}

// DialPort connects to TCP port of a NetworkNAT sandbox's guest, as a
// connection to a published port would (the guest sees it come from
// 10.0.2.2), without publishing anything on the host: what `gvx serve`
// uses for E2B's sandbox URLs. It counts against the NAT's
// MaxConnections and Bandwidth. A sandbox without a NAT is
// ErrUnsupported; a port nobody listens on is an error naming it.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, errorf("dial port", s.id, ErrInvalid, "port %d: want 1 to 65535", port)
	}
	_, sock, err := s.natControl("dial port")
	if err != nil {
		return nil, err
	}
	c, err := api.DialNATPort(ctx, sock, uint16(port))
	if err != nil {
		return nil, newError("dial port", s.id, nil, err)
	}
	return c, nil
}

// sameNarrow says whether a and b narrow alike (nil and empty lists are
// none).
func sameNarrow(a, b *api.Narrow) bool {
	enc := func(n *api.Narrow) string {
		if n == nil || n.Default == "" && len(n.Allow) == 0 && len(n.Deny) == 0 {
			return ""
		}
		data, _ := json.Marshal(n)
		return string(data)
	}
	return enc(a) == enc(b)
}
