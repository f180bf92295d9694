package gvx

import (
	"context"
	"encoding/json"
	"fmt"
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
	var n *api.Narrow
	if def != "" || allow != nil || deny != nil {
		n = &api.Narrow{Default: def, Allow: allow, Deny: deny}
		if err := n.Check(); err != nil {
			return newError("narrow egress", s.id, ErrInvalid, err)
		}
	}
	ctx = s.c.Context(ctx)
	s.bmu.Lock()
	cont := s.container
	s.bmu.Unlock()
	if cont == nil || s.curTask() == nil {
		return newError("narrow egress", s.id, ErrNotRunning, nil)
	}
	// The NAT's control socket is in the sentry root of the sandbox the
	// container runs in (a pool's, for an adopted one: the root is a
	// link to it).
	root := filepath.Join(api.Layout{Dir: s.c.cfg.StateDir}.SentryRoot(cont.ID()), s.c.opts.Namespace)
	socks, _ := filepath.Glob(filepath.Join(root, api.NATControlGlob))
	if len(socks) != 1 {
		return errorf("narrow egress", s.id, ErrUnsupported, "the sandbox has no NAT to narrow (%d control sockets in %s): create it with Network %q", len(socks), root, NetworkNAT)
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
		if e := nat.Egress; e.Default == "" && e.Allow == nil && e.Deny == nil && e.Narrow == nil {
			nat.Egress = nil
		}
	case n != nil:
		nat.Egress = &api.Egress{Narrow: n}
	}
	if err := api.SetNATNarrow(ctx, socks[0], n); err != nil {
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
