// Package podnet gives a running sandbox the interfaces of a pod's network
// namespace.
//
// A CRI pod that adopts a warm-pool sandbox was booted before the pod's
// network namespace existed; its sandbox container's create attaches the
// namespace's interfaces to the Sentry's netstack (Attach). The package
// links runsc's boot code, so it is kept apart from package netns, which
// the small gvx-hook binary links.
package podnet

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	"gvisor.dev/gvisor/runsc/boot"
	"gvisor.dev/gvisor/runsc/config"
)

// CreateLinksAndRoutes is gVisor's control call that adds NICs, their
// addresses and routes to a running Sentry's netstack (boot.Network).
// Each NIC gets the stack's next free id, so the sandbox's loopback (NIC
// 1, from its boot) stays as it is; the call replaces the route table
// with the routes it is given.
const CreateLinksAndRoutes = "Network.CreateLinksAndRoutes"

// A Caller makes a control call on a running sandbox (a *urpc.Client).
type Caller interface {
	Call(method string, arg, result any) error
}

// packetBuffer is each AF_PACKET socket's buffer, each way.
const packetBuffer = 4 << 20

// Attach gives the running sandbox behind c the interfaces of the network
// namespace at nsPath — what a sandbox booted there with --network=sandbox
// would have had: each interface that is up, other than lo, becomes a NIC
// of the guest on an AF_PACKET socket bound to it, with its addresses,
// MAC, MTU and routes (the default routes included). Once the guest has
// them, the addresses are removed from the host side of the interfaces,
// so that the host kernel no longer answers for the guest's addresses
// (the host's routes through those interfaces go with them). Nothing on
// the host changes if the call fails. It returns the names of the
// interfaces it attached.
func Attach(c Caller, nsPath string) ([]string, error) {
	var (
		args  *boot.CreateLinksAndRoutesArgs
		links []netlink.Link
	)
	if err := inNetns(nsPath, func() (err error) {
		args, links, err = scan()
		return err
	}); err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range args.FilePayload.Files {
			f.Close()
		}
	}()
	var names []string
	for _, l := range args.FDBasedLinks {
		names = append(names, l.Name)
	}
	if len(names) == 0 {
		return nil, nil
	}
	if err := c.Call(CreateLinksAndRoutes, args, nil); err != nil {
		return nil, fmt.Errorf("give the sandbox %v of %s: %w", names, nsPath, err)
	}
	if err := inNetns(nsPath, func() error { return stripAddrs(links) }); err != nil {
		return names, err
	}
	return names, nil
}

// inNetns runs f on an OS thread in the network namespace at nsPath. The
// thread is never handed back to the Go scheduler (it exits with the
// goroutine), so no other goroutine runs in the namespace.
func inNetns(nsPath string, f func() error) error {
	ns, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", nsPath, err)
	}
	defer unix.Close(ns)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("enter network namespace %s: %w", nsPath, err)
			return
		}
		done <- f()
	}()
	return <-done
}

// scan reads the calling thread's network namespace: the arguments of
// CreateLinksAndRoutes for every interface that is up but lo, with an
// AF_PACKET socket bound to each, and the links themselves.
func scan() (_ *boot.CreateLinksAndRoutesArgs, _ []netlink.Link, retErr error) {
	all, err := netlink.LinkList()
	if err != nil {
		return nil, nil, fmt.Errorf("list links: %w", err)
	}
	args := &boot.CreateLinksAndRoutesArgs{}
	defer func() {
		if retErr != nil {
			for _, f := range args.FilePayload.Files {
				f.Close()
			}
		}
	}()
	var links []netlink.Link
	for _, l := range all {
		a := l.Attrs()
		if a.Flags&net.FlagUp == 0 || a.Flags&net.FlagLoopback != 0 {
			continue
		}
		link := boot.FDBasedLink{
			Name:              a.Name,
			InterfaceIndex:    a.Index,
			MTU:               a.MTU,
			LinkAddress:       a.HardwareAddr,
			RXChecksumOffload: true,
			QDisc:             config.QDiscFIFO,
			NumChannels:       1,
			IsPacket:          []bool{true},
			PreConfigured:     true,
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, nil, fmt.Errorf("addresses of %s: %w", a.Name, err)
		}
		for _, ad := range addrs {
			ones, _ := ad.Mask.Size()
			link.Addresses = append(link.Addresses, boot.IPWithPrefix{Address: ad.IP, PrefixLen: ones})
		}
		routes, err := netlink.RouteList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, nil, fmt.Errorf("routes of %s: %w", a.Name, err)
		}
		for _, r := range routes {
			if err := addRoute(args, &link, r); err != nil {
				return nil, nil, err
			}
		}
		f, err := packetSocket(a.Index)
		if err != nil {
			return nil, nil, fmt.Errorf("interface %s: %w", a.Name, err)
		}
		args.FilePayload.Files = append(args.FilePayload.Files, f)
		args.FDBasedLinks = append(args.FDBasedLinks, link)
		links = append(links, l)
	}
	return args, links, nil
}

// addRoute adds netlink route r of link to the call's arguments: a default
// route as the default gateway, any other on the link.
func addRoute(args *boot.CreateLinksAndRoutesArgs, link *boot.FDBasedLink, r netlink.Route) error {
	v4 := r.Family == unix.AF_INET
	if r.Family == 0 {
		// Not every netlink reply fills it in.
		v4 = (r.Gw != nil && r.Gw.To4() != nil) || (r.Dst != nil && r.Dst.IP.To4() != nil)
	}
	if r.Dst == nil || isDefault(r.Dst) {
		bits := 128
		zero := net.IPv6zero
		if v4 {
			bits, zero = 32, net.IPv4zero.To4()
		}
		def := boot.DefaultRoute{Name: link.Name, Route: boot.Route{
			Destination: net.IPNet{IP: zero, Mask: net.CIDRMask(0, bits)}, Gateway: r.Gw}}
		if r.Gw == nil {
			return nil // a default route without a gateway: nothing to route through
		}
		if v4 {
			if args.Defaultv4Gateway.Name != "" {
				return fmt.Errorf("two IPv4 default routes (%s, %s): not supported", args.Defaultv4Gateway.Name, link.Name)
			}
			args.Defaultv4Gateway = def
		} else {
			if args.Defaultv6Gateway.Name != "" {
				return fmt.Errorf("two IPv6 default routes (%s, %s): not supported", args.Defaultv6Gateway.Name, link.Name)
			}
			args.Defaultv6Gateway = def
		}
		return nil
	}
	dst := *r.Dst
	if ip4 := dst.IP.To4(); v4 && ip4 != nil {
		dst.IP = ip4
	}
	link.Routes = append(link.Routes, boot.Route{Destination: dst, Gateway: r.Gw, MTU: uint32(r.MTU)})
	return nil
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0 && n.IP.IsUnspecified()
}

// packetSocket opens an AF_PACKET socket on interface index, set up as
// gVisor's fdbased link expects of a pre-configured one (its own fanout
// group: gVisor's seccomp filters forbid the setsockopt in the Sentry).
func packetSocket(index int) (*os.File, error) {
	proto := int(htons(unix.ETH_P_ALL))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "packet")
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: index}); err != nil {
		f.Close()
		return nil, fmt.Errorf("bind AF_PACKET socket: %w", err)
	}
	// As root: past net.core.wmem_max/rmem_max.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, packetBuffer)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, packetBuffer)
	if _, err := fdbased.CreatePacketFanoutGroup(fd); err != nil {
		f.Close()
		return nil, fmt.Errorf("packet fanout: %w", err)
	}
	return f, nil
}

// stripAddrs removes every address of links from the host side.
func stripAddrs(links []netlink.Link) error {
	var errs []error
	for _, l := range links {
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			errs = append(errs, fmt.Errorf("addresses of %s: %w", l.Attrs().Name, err))
			continue
		}
		for _, a := range addrs {
			if err := netlink.AddrDel(l, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				errs = append(errs, fmt.Errorf("remove %s from host interface %s: %w", a.IPNet, l.Attrs().Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
