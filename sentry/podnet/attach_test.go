package podnet

import (
	"net"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestScan: in a network namespace of its own (gone with the test's
// thread), an interface that is up with an address and a default route
// through a gateway becomes one fdbased link with that address, its
// subnet's route and the default gateway; lo and interfaces that are down
// are left out; stripAddrs then leaves the host side without addresses.
func TestScan(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a network namespace of its own)")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread and its namespace end with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		lo, _ := netlink.LinkByName("lo")
		_ = netlink.LinkSetUp(lo)
		// A veth pair whose other end (down0) stays down.
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", MTU: 1400}, PeerName: "down0"}); err != nil {
			t.Errorf("add veth: %v", err)
			return
		}
		eth0, _ := netlink.LinkByName("eth0")
		addr, _ := netlink.ParseAddr("10.99.0.5/24")
		if err := netlink.AddrAdd(eth0, addr); err != nil {
			t.Errorf("address: %v", err)
			return
		}
		if err := netlink.LinkSetUp(eth0); err != nil {
			t.Errorf("up: %v", err)
			return
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.ParseIP("10.99.0.1")}); err != nil {
			t.Errorf("default route: %v", err)
			return
		}
		args, links, err := scan()
		if err != nil {
			t.Errorf("scan: %v", err)
			return
		}
		defer func() {
			for _, f := range args.FilePayload.Files {
				f.Close()
			}
		}()
		if len(args.FDBasedLinks) != 1 || len(links) != 1 || len(args.FilePayload.Files) != 1 {
			t.Errorf("links %+v, want eth0 alone", args.FDBasedLinks)
			return
		}
		l := args.FDBasedLinks[0]
		if l.Name != "eth0" || l.MTU != 1400 || len(l.LinkAddress) != 6 || !l.PreConfigured || len(l.IsPacket) != 1 || !l.IsPacket[0] {
			t.Errorf("eth0 link %+v", l)
		}
		found := false
		for _, a := range l.Addresses {
			if a.Address.Equal(net.ParseIP("10.99.0.5")) && a.PrefixLen == 24 {
				found = true
			}
		}
		if !found {
			t.Errorf("eth0 addresses %+v, want 10.99.0.5/24", l.Addresses)
		}
		subnet := false
		for _, r := range l.Routes {
			if r.Destination.String() == "10.99.0.0/24" {
				subnet = true
			}
		}
		if !subnet {
			t.Errorf("eth0 routes %+v, want 10.99.0.0/24", l.Routes)
		}
		d := args.Defaultv4Gateway
		if d.Name != "eth0" || !d.Route.Gateway.Equal(net.ParseIP("10.99.0.1")) || d.Route.Destination.String() != "0.0.0.0/0" {
			t.Errorf("default v4 gateway %+v, want eth0 via 10.99.0.1", d)
		}
		if err := stripAddrs(links); err != nil {
			t.Errorf("strip: %v", err)
		}
		left, _ := netlink.AddrList(eth0, netlink.FAMILY_V4)
		if len(left) != 0 {
			t.Errorf("host side of eth0 after stripAddrs: %v", left)
		}
	}()
	<-done
}
