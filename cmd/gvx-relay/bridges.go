package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The bridges subcommand (api.RelayBridgesCommand) makes dockerd's bridges
// again in a restored guest:
//
//	gvx-relay bridges NAME=GATEWAY/BITS...
//
// For each: a bridge device NAME (kept if there is one), the address
// GATEWAY/BITS on it, the device up, and a route to the subnet through
// it — what `ip link add NAME type bridge`, `ip addr add`, `ip link set
// up` and `ip route replace` do, through route netlink in this one
// process instead of a shell and five `ip` processes in the guest (each
// process start in gVisor costs tens of ms), and without needing `ip` in
// the image.

// bridge is one device bridges makes.
type bridge struct {
	name string
	addr netip.Prefix // the gateway's address, with the subnet's length
}

// parseBridges parses bridges' arguments.
func parseBridges(args []string) ([]bridge, error) {
	if len(args) == 0 {
		return nil, errors.New("no bridge: want NAME=GATEWAY/BITS...")
	}
	var out []bridge
	for _, a := range args {
		name, addr, ok := strings.Cut(a, "=")
		if !ok || name == "" || len(name) > unix.IFNAMSIZ-1 || strings.ContainsAny(name, "/ \t\n") {
			return nil, fmt.Errorf("bridge %q: want NAME=GATEWAY/BITS with a device name of at most %d characters", a, unix.IFNAMSIZ-1)
		}
		p, err := netip.ParsePrefix(addr)
		if err != nil {
			return nil, fmt.Errorf("bridge %q: %w", a, err)
		}
		out = append(out, bridge{name: name, addr: p})
	}
	return out, nil
}

// makeBridges makes each bridge.
func makeBridges(bridges []bridge) error {
	for _, b := range bridges {
		if err := makeBridge(b); err != nil {
			return fmt.Errorf("bridge %s (%s): %w", b.name, b.addr, err)
		}
	}
	return nil
}

// makeBridge makes b: the device, its address, up, the subnet's route.
func makeBridge(b bridge) error {
	attrs := netlink.NewLinkAttrs()
	attrs.Name = b.name
	if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add the device: %w", err)
	}
	link, err := netlink.LinkByName(b.name)
	if err != nil {
		return fmt.Errorf("find the device: %w", err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: b.addr.Addr().AsSlice(), Mask: net.CIDRMask(b.addr.Bits(), b.addr.Addr().BitLen())}}
	if err := netlink.AddrAdd(link, addr); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add the address: %w", err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("set the device up: %w", err)
	}
	dst := b.addr.Masked()
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Scope: netlink.SCOPE_LINK,
		Dst: &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())}}
	if err := netlink.RouteReplace(route); err != nil {
		return fmt.Errorf("route %s: %w", dst, err)
	}
	return nil
}
