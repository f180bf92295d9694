package crifwd

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// newNetNS gives the test a network namespace of its own (loopback up)
// held by a locked thread until the test ends, and returns its path.
func newNetNS(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (a network namespace and BPF)")
	}
	ready, done := make(chan string), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ready <- "error: " + err.Error()
			return
		}
		ready <- fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		<-done
	}()
	p := <-ready
	if strings.HasPrefix(p, "error: ") {
		t.Fatal(p)
	}
	t.Cleanup(func() { close(done) })
	if err := InNetNS(p, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq("lo")
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_UP)
		return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
	}); err != nil {
		t.Fatal(err)
	}
	return p
}

// dialIn connects to 127.0.0.1:port from inside the namespace at ns and
// returns what the server said, or the error.
func dialIn(ns string, port int) (string, error) {
	var got string
	err := InNetNS(ns, func() error {
		c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return err
		}
		_ = c.(*net.TCPConn).CloseWrite()
		b, err := io.ReadAll(c)
		got = string(b)
		return err
	})
	return got, err
}

// TestForwarder: with a Forwarder on a namespace, a connection to any
// port of that namespace's 127.0.0.1 reaches the target's same port (here
// a server on the test's own loopback) and carries both directions and
// the half-close; without it the same dial is refused; after Close it is
// refused again.
func TestForwarder(t *testing.T) {
	ns := newNetNS(t)
	srv, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go func() {
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c) // until the client's half-close
				fmt.Fprintf(c, "pong:%s", b)
			}()
		}
	}()
	port := srv.Addr().(*net.TCPAddr).Port
	if got, err := dialIn(ns, port); err == nil {
		t.Fatalf("before the Forwarder, 127.0.0.1:%d in the namespace answered %q", port, got)
	}
	f, err := Start(context.Background(), ns, TCPTo(netip.MustParseAddr("127.0.0.1")))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if got, err := dialIn(ns, port); err != nil || got != "pong:ping\n" {
			t.Fatalf("through the Forwarder: %q, %v", got, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := dialIn(ns, port); err == nil {
		t.Fatalf("after Close, 127.0.0.1:%d in the namespace answered %q", port, got)
	}
}

func TestPodAddr(t *testing.T) {
	ns := newNetNS(t)
	if a, err := PodAddr(ns); err == nil || !strings.Contains(err.Error(), "no IPv4 address") {
		t.Errorf("PodAddr of a namespace with only lo: %v, %v; want an error saying it has none", a, err)
	}
	if _, err := PodAddr("/nonexistent/ns"); err == nil || !strings.Contains(err.Error(), "/nonexistent/ns") {
		t.Errorf("PodAddr of a missing path: %v, want an error naming it", err)
	}
}
