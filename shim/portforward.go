package shim

import (
	"context"
	"fmt"
	"net"
	"path/filepath"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/crifwd"
	"github.com/gvxrun/gvx/oci"
)

// preparePortForward makes CRI port forwarding (kubectl port-forward)
// reach a pod's sandbox: containerd dials localhost:PORT in the pod's
// network namespace, and internal/crifwd steers that dial to the pod —
// on network "sandbox" to the pod's address, where gVisor's netstack
// listens (read now, before gVisor takes the namespace's addresses); on
// the NAT to the guest's port through the NAT's control socket. For a
// pod's sandbox task in a network namespace of its own. A node where this
// cannot be set up (no sk_lookup BPF) runs the pod without it and logs
// why. A pod on the host network needs none (its listeners are the
// host's).
func (t *gvxTask) preparePortForward(ctx context.Context) error {
	if t.role != oci.RolePause || t.network != api.NetworkSandbox && t.network != api.NetworkNAT {
		return nil
	}
	ns := oci.NetnsPath(t.spec)
	if ns == "" {
		return nil
	}
	var dial crifwd.Dialer
	if t.network == api.NetworkNAT {
		dial = natDialer(api.SentryRoot(filepath.Join(t.layout.SentryRoot(t.rec.ID), t.rec.Namespace)))
	} else {
		addr, err := crifwd.PodAddr(ns)
		if err != nil {
			log.G(ctx).WithError(err).Warnf("gvx shim: pod %s: no port forwarding (kubectl port-forward will be refused)", t.req.ID)
			return nil
		}
		dial = crifwd.TCPTo(addr)
	}
	f, err := crifwd.Start(context.WithoutCancel(ctx), ns, dial)
	if err != nil {
		log.G(ctx).WithError(err).Warnf("gvx shim: pod %s: no port forwarding (kubectl port-forward will be refused)", t.req.ID)
		return nil
	}
	t.fwd = f
	return nil
}

// natDialer dials guest ports through the control socket of the NAT in
// sentry root (found at each dial: the NAT starts with the sandbox, after
// this; an adopted pool sandbox's root is a link to the pool's).
func natDialer(root api.SentryRoot) crifwd.Dialer {
	return func(ctx context.Context, port uint16) (net.Conn, error) {
		sock, err := root.FindNATControl()
		if err != nil {
			return nil, fmt.Errorf("the pod's NAT: %w", err)
		}
		return api.DialNATPort(ctx, sock, port)
	}
}
