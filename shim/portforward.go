package shim

import (
	"context"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/crifwd"
	"github.com/gvxrun/gvx/oci"
)

// preparePortForward makes CRI port forwarding (kubectl port-forward)
// reach a pod's sandbox: containerd dials localhost:PORT in the pod's
// network namespace, and internal/crifwd steers that dial to the pod's
// address, where gVisor's netstack listens. For a pod's sandbox task on
// network "sandbox" in a namespace of its own; the pod's address is read
// now, before gVisor takes the namespace's addresses. A node where this
// cannot be set up (no sk_lookup BPF) runs the pod without it and logs
// why. A pod on the host network needs none (its listeners are the
// host's); a NAT pod's ports are its published ones.
func (t *gvxTask) preparePortForward(ctx context.Context) error {
	if t.role != oci.RolePause || t.network != api.NetworkSandbox {
		return nil
	}
	ns := oci.NetnsPath(t.spec)
	if ns == "" {
		return nil
	}
	addr, err := crifwd.PodAddr(ns)
	if err != nil {
		log.G(ctx).WithError(err).Warnf("gvx shim: pod %s: no port forwarding (kubectl port-forward will be refused)", t.req.ID)
		return nil
	}
	f, err := crifwd.Start(context.WithoutCancel(ctx), ns, addr)
	if err != nil {
		log.G(ctx).WithError(err).Warnf("gvx shim: pod %s: no port forwarding (kubectl port-forward will be refused)", t.req.ID)
		return nil
	}
	t.fwd = f
	return nil
}
