package main

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseBridges(t *testing.T) {
	got, err := parseBridges([]string{"docker0=172.17.0.1/16", "br-0123456789ab=fd00:1::1/64"})
	if err != nil || len(got) != 2 || got[0].name != "docker0" || got[0].addr != netip.MustParsePrefix("172.17.0.1/16") ||
		got[1].name != "br-0123456789ab" || got[1].addr != netip.MustParsePrefix("fd00:1::1/64") {
		t.Errorf("parseBridges: %+v, %v", got, err)
	}
	for _, bad := range [][]string{nil, {"docker0"}, {"=172.17.0.1/16"}, {"docker0=172.17.0.1"}, {"a-name-that-is-too-long=10.0.0.1/8"}, {"a/b=10.0.0.1/8"}} {
		if _, err := parseBridges(bad); err == nil {
			t.Errorf("parseBridges(%q): no error", bad)
		}
	}
}

// TestMakeBridges makes two bridges through the host kernel's route
// netlink in a network namespace of its own (root only), twice (the
// second finds them made), and checks each device is up with its address
// and the route to its subnet.
func TestMakeBridges(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (a network namespace)")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		bridges, err := parseBridges([]string{"gvxbr0=172.31.0.1/16", "gvxbr1=10.99.3.1/24"})
		if err != nil {
			t.Error(err)
			return
		}
		for i := 0; i < 2; i++ {
			if err := makeBridges(bridges); err != nil {
				t.Errorf("round %d: %v", i, err)
				return
			}
		}
		for _, b := range bridges {
			ifc, err := net.InterfaceByName(b.name)
			if err != nil {
				t.Errorf("%s: %v", b.name, err)
				continue
			}
			if ifc.Flags&net.FlagUp == 0 {
				t.Errorf("%s is not up: %v", b.name, ifc.Flags)
			}
			addrs, err := ifc.Addrs()
			found := false
			for _, a := range addrs {
				found = found || a.String() == b.addr.String()
			}
			if err != nil || !found {
				t.Errorf("%s's addresses: %v, %v; want %s among them", b.name, addrs, err, b.addr)
			}
			if out, err := exec.Command("ip", "-d", "link", "show", b.name).Output(); err != nil || !strings.Contains(string(out), "bridge") {
				t.Errorf("%s is not a bridge: %s, %v", b.name, out, err)
			}
			out, err := exec.Command("ip", "route", "show", "dev", b.name).Output()
			if err != nil || !strings.Contains(string(out), b.addr.Masked().String()) {
				t.Errorf("%s's routes: %q, %v; want one to %s", b.name, out, err, b.addr.Masked())
			}
		}
	}()
	<-done
}
