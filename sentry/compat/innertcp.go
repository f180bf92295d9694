package compat

import (
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/sentry/inet"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/pkg/sentry/socket/netstack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/gvxrun/gvx/api"
)

// innerTCPIoctl serves api.IoctlInnerTCP on a socket: it returns how many
// TCP endpoints the stacks of the sandbox's inner network namespaces (all
// but the root one) hold in a state gVisor's restore waits on.
//
// gVisor's restore counts every TCP endpoint it loads in a listening,
// connecting or connected state (TIME-WAIT included) in package-wide wait
// groups, and only the root namespace's stack restores its endpoints and
// releases them: an inner namespace gets a new empty stack
// (inet.Namespace.afterLoad), and the endpoints of its saved one are
// never restored. The root stack's own listeners (dockerd's) wait on those
// groups, so the restore of such a checkpoint never finishes. Reading the
// states changes nothing, so any guest process may ask.
var innerTCPIoctl = guestIoctl(api.IoctlInnerTCP, func(t *kernel.Task) int { return innerTCP(t, t.Kernel()) })

// innerTCP counts the TCP endpoints that restoreWaits on in the stacks of
// kernel k's network namespaces other than the root one.
func innerTCP(ctx context.Context, k *kernel.Kernel) int {
	n := 0
	eachInnerNetNS(ctx, k, func(ns *inet.Namespace) {
		st, ok := ns.Stack().(*netstack.Stack)
		if !ok || st == nil {
			return
		}
		for _, ep := range st.Stack.RegisteredEndpoints() {
			if e, ok := ep.(*tcp.Endpoint); ok && restoreWaits(e.EndpointState()) {
				n++
			}
		}
	})
	return n
}

// restoreWaits reports whether gVisor's restore of a TCP endpoint saved in
// state s waits for it (tcp's loadState: connected, listening or
// connecting); initial, bound, closed and failed endpoints it does not.
func restoreWaits(s tcp.EndpointState) bool {
	switch s {
	case tcp.StateInitial, tcp.StateBound, tcp.StateClose, tcp.StateError:
		return false
	}
	return true
}
