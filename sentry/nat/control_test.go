package nat

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"

	"github.com/gvxrun/gvx/api"
)

// TestControl: a narrowing sent on the control socket decides the
// guest's next flows (refused at once, no host socket), lifting it lets
// them through again, and a bad one is refused with the reason, leaving
// the one before in force.
func TestControl(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gvx-nat-t.sock")
	if err := os.WriteFile(path, nil, 0o600); err != nil { // a dead NAT's leftover
		t.Fatal(err)
	}
	ctl, err := ListenControl(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket: %v %v, want a socket of mode 0600", fi.Mode(), err)
	}
	g, _, d := setupWith(t, Options{Control: ctl})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dst := full(netip.MustParseAddr("203.0.113.7"), 443)
	reached := func() bool {
		c, err := gonet.DialContextTCP(ctx, g, dst, ipv4.ProtocolNumber)
		if err != nil {
			if !strings.Contains(err.Error(), "refused") {
				t.Fatalf("dial: %v, want success or connection refused", err)
			}
			return false
		}
		io.ReadAll(c)
		c.Close()
		return true
	}
	if !reached() {
		t.Fatal("refused before any narrowing")
	}
	if err := api.SetNATNarrow(ctx, path, &api.Narrow{Default: "deny", Allow: []string{"198.51.100.0/24"}}); err != nil {
		t.Fatal(err)
	}
	if reached() {
		t.Fatal("reached after a deny-all narrowing")
	}
	// Check refuses a bad rule before it is sent; the NAT refuses what
	// a client that skipped the check sends.
	if err := api.SetNATNarrow(ctx, path, &api.Narrow{Default: "perhaps"}); err == nil || !strings.Contains(err.Error(), "perhaps") {
		t.Fatalf("bad narrowing: %v", err)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, `{"narrow":{"allow":["not a rule!"]}}`+"\n")
	reply, _ := io.ReadAll(c)
	c.Close()
	if !strings.Contains(string(reply), "not a rule!") {
		t.Fatalf("the NAT's answer to a bad rule: %s", reply)
	}
	if reached() {
		t.Fatal("a refused narrowing replaced the one before")
	}
	if err := api.SetNATNarrow(ctx, path, nil); err != nil {
		t.Fatal(err)
	}
	if !reached() {
		t.Fatal("refused after the narrowing was lifted")
	}
	if l := d.list(); len(l) != 2 {
		t.Errorf("host sockets %q, want 2 (the refused flows open none)", l)
	}
}

// TestControlDial: a dial on the control socket reaches a guest port
// (from 10.0.2.2) and carries its stream both ways; a port nobody
// listens on is an error naming it.
func TestControlDial(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gvx-nat-d.sock")
	ctl, err := ListenControl(path)
	if err != nil {
		t.Fatal(err)
	}
	g, n, _ := setupWith(t, Options{Control: ctl})
	l, err := gonet.ListenTCP(g, tcpip.FullAddress{NIC: 1, Port: 7000}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	from := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		from <- c.RemoteAddr().String()
		b := make([]byte, 4)
		io.ReadFull(c, b)
		c.Write(append([]byte("pong:"), b...))
		c.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := api.DialNATPort(ctx, path, 7000)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "ping")
	got, _ := io.ReadAll(c)
	c.Close()
	if string(got) != "pong:ping" {
		t.Errorf("through the dial: %q, want pong:ping", got)
	}
	if f := <-from; !strings.HasPrefix(f, "10.0.2.2:") {
		t.Errorf("the guest saw the connection from %s, want 10.0.2.2", f)
	}
	if _, err := api.DialNATPort(ctx, path, 7001); err == nil || !strings.Contains(err.Error(), "guest port 7001") {
		t.Errorf("dial of a closed guest port: %v, want an error naming it", err)
	}
	if s := n.stats.Get(); s.Published != 2 {
		t.Errorf("stats %+v, want 2 published connections", s)
	}
}
