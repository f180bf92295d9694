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

	"golang.org/x/sys/unix"
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
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := &dials{}
	n, err := New(Options{LinkFD: fds[1], Dial: d.dial, Control: ctl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	g := guestStack(t, fds[0])
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
