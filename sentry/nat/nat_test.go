package nat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/gvxrun/gvx/api"
)

// guestStack is a gVisor netstack configured as a NAT sandbox's guest
// (eth0 10.0.2.15/24, default via 10.0.2.2) on fd, as the Sentry's is.
func guestStack(t *testing.T, fd int) *stack.Stack { return guestStackMTU(t, fd, api.NATMTU) }

func guestStackMTU(t testing.TB, fd int, mtu uint32) *stack.Stack {
	t.Helper()
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4},
	})
	ep, err := fdbased.New(&fdbased.Options{FDs: []int{fd}, MTU: mtu, PacketDispatchMode: fdbased.RecvMMsg,
		TXChecksumOffload: true, RXChecksumOffload: true})
	if err != nil {
		t.Fatal(err)
	}
	if e := s.CreateNIC(1, ep); e != nil {
		t.Fatal(e)
	}
	pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddressWithPrefix{
		Address: tcpip.AddrFrom4(api.NATGuest.As4()), PrefixLen: 24}}
	if e := s.AddProtocolAddress(1, pa, stack.AddressProperties{}); e != nil {
		t.Fatal(e)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, Gateway: tcpip.AddrFrom4(api.NATGateway.As4()), NIC: 1}})
	// Destroy stops the link's reader before startNAT's cleanup closes
	// the fd: a reader left running would read, and answer, the packets
	// of the next test's link given the same fd number.
	t.Cleanup(s.Destroy)
	return s
}

// dials records the host sockets the NAT asks for and answers each TCP one
// with "ok from " and the address.
type dials struct {
	mu   sync.Mutex
	addr []string
}

func (d *dials) dial(_ context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.addr = append(d.addr, network+"/"+address)
	d.mu.Unlock()
	a, b := net.Pipe()
	go func() {
		io.WriteString(b, "ok from "+address)
		b.Close()
	}()
	return a, nil
}

func (d *dials) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.addr...)
}

func setup(t *testing.T, cfg api.NAT) (*stack.Stack, *NAT, *dials) {
	return setupWith(t, Options{Config: cfg})
}

// setupWith starts a NAT with o (startNAT) and the guest's stack, at o's
// MTU, on the other end of its link.
func setupWith(t testing.TB, o Options) (*stack.Stack, *NAT, *dials) {
	t.Helper()
	fd, n, d := startNAT(t, o)
	mtu := o.MTU
	if mtu == 0 {
		mtu = api.NATMTU
	}
	return guestStackMTU(t, fd, mtu), n, d
}

// startNAT starts a NAT with o — its link and, unless o has them, a fake
// dialer and no host echo sockets filled in — and returns the guest's end
// of the link (closed when the test ends) and the dialer.
func startNAT(t testing.TB, o Options) (int, *NAT, *dials) {
	t.Helper()
	fds, err := LinkPair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	d := &dials{}
	o.LinkFD = fds[1]
	if o.Dial == nil {
		o.Dial = d.dial
	}
	if o.Echo == nil {
		o.Echo = noEcho
	}
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return fds[0], n, d
}

func full(a netip.Addr, port uint16) tcpip.FullAddress {
	return tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(a.As4()), Port: port}
}

// lookup asks 10.0.2.3 for name's A record from the guest.
func lookup(t *testing.T, g *stack.Stack, name string) netip.Addr {
	t.Helper()
	c, err := gonet.DialUDP(g, nil, &tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(api.NATDNS.As4()), Port: 53}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: 7, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	b, _ := q.Pack()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1500)
	k, err := c.Read(buf)
	if err != nil {
		t.Fatalf("dns answer for %s: %v", name, err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:k]); err != nil || len(m.Answers) != 1 {
		t.Fatalf("dns answer for %s: %v %+v", name, err, m)
	}
	return netip.AddrFrom4(m.Answers[0].Body.(*dnsmessage.AResource).A)
}

// TestNameAllow: with default deny, a name rule admits the addresses the
// NAT's DNS answered for that name only; a refused flow is an RST before
// any host socket is asked for.
func TestNameAllow(t *testing.T) {
	server := startTCPDNS(t, map[string][]netip.Addr{
		"allowed.test.": {netip.MustParseAddr("203.0.113.10")},
		"denied.test.":  {netip.MustParseAddr("203.0.113.11")},
	}, nil).addr
	g, n, d := setup(t, api.NAT{DNS: []string{server}, Egress: &api.Egress{Default: "deny", Allow: []string{"allowed.test:80"}}})
	ok, bad := lookup(t, g, "allowed.test."), lookup(t, g, "denied.test.")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := gonet.DialContextTCP(ctx, g, full(ok, 80), ipv4.ProtocolNumber)
	if err != nil {
		t.Fatalf("dial allowed.test (%s): %v", ok, err)
	}
	got, _ := io.ReadAll(c)
	c.Close()
	if string(got) != "ok from 203.0.113.10:80" {
		t.Errorf("allowed flow read %q", got)
	}
	for _, dst := range []tcpip.FullAddress{full(bad, 80), full(ok, 81), full(netip.MustParseAddr("169.254.169.254"), 80), full(api.NATGateway, 80)} {
		start := time.Now()
		_, err := gonet.DialContextTCP(ctx, g, dst, ipv4.ProtocolNumber)
		if err == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("dial %v: %v, want connection refused", dst, err)
		}
		if time.Since(start) > time.Second {
			t.Errorf("refusal of %v took %v, want an immediate RST", dst, time.Since(start))
		}
	}
	if l := d.list(); len(l) != 1 || l[0] != "tcp/203.0.113.10:80" {
		t.Errorf("host sockets asked for: %q, want only tcp/203.0.113.10:80", l)
	}
	if s := n.stats.Get(); s.Refused != 4 || s.Allowed != 1 || s.HostSockets != 1 || s.DNSQueries != 2 {
		t.Errorf("stats %+v, want 4 refused, 1 allowed, 1 host socket, 2 DNS queries", s)
	}
}

// TestUDPRefusal: a refused UDP flow gets ICMP port unreachable (the
// guest's socket reports connection refused) and no host socket; an
// allowed one is relayed; 10.0.2.2 maps to the host's loopback.
func TestUDPRefusal(t *testing.T) {
	g, n, d := setup(t, api.NAT{DNS: []string{"127.0.0.1:9"}, Egress: &api.Egress{Allow: []string{"10.0.2.2:7000"}}})
	c, err := gonet.DialUDP(g, nil, &tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4([4]byte{10, 1, 2, 3}), Port: 9}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("x"))
	unreachable := g.Stats().ICMP.V4.PacketsReceived.DstUnreachable
	for deadline := time.Now().Add(3 * time.Second); unreachable.Value() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if unreachable.Value() != 1 {
		t.Errorf("the guest got %d ICMP destination unreachable for a refused datagram, want 1", unreachable.Value())
	}
	if _, err := c.Write([]byte("x")); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("the next write on the refused flow: %v, want connection refused", err)
	}
	u, err := gonet.DialUDP(g, nil, &tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(api.NATGateway.As4()), Port: 7000}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	u.Write([]byte("y"))
	deadline := time.Now().Add(3 * time.Second)
	for len(d.list()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if l := d.list(); len(l) != 1 || l[0] != "udp/127.0.0.1:7000" {
		t.Errorf("host sockets: %q, want udp/127.0.0.1:7000 only", l)
	}
	if s := n.stats.Get(); s.Refused != 1 {
		t.Errorf("stats %+v, want 1 refused", s)
	}
}

// noEcho stands in for OpenEcho in tests, which send nothing off this
// machine: as a host that allows no ping socket.
func noEcho() (net.PacketConn, error) { return nil, errors.New("no host echo sockets in these tests") }

// TestPing: the NAT answers echo requests to its own addresses itself,
// not one to another address (which goes to the host: echo_test.go).
func TestPing(t *testing.T) {
	g, _, _ := setup(t, api.NAT{DNS: []string{"127.0.0.1:9"}})
	if !ping(t, g, api.NATGateway) {
		t.Error("no echo reply from 10.0.2.2")
	}
	if ping(t, g, netip.MustParseAddr("198.51.100.7")) {
		t.Error("an echo reply from 198.51.100.7: the NAT answered for an address it is not")
	}
}

func ping(t *testing.T, g *stack.Stack, dst netip.Addr) bool {
	t.Helper()
	var wq waiter.Queue
	ep, e := g.NewEndpoint(icmp.ProtocolNumber4, ipv4.ProtocolNumber, &wq)
	if e != nil {
		t.Fatal(e)
	}
	conn := gonet.NewUDPConn(&wq, ep)
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	req := header.ICMPv4(make([]byte, header.ICMPv4MinimumSize+4))
	req.SetType(header.ICMPv4Echo)
	req.SetIdent(1)
	req.SetSequence(1)
	if _, err := conn.WriteTo(req, &net.UDPAddr{IP: dst.AsSlice()}); err != nil {
		t.Fatal(err)
	}
	_, _, err := conn.ReadFrom(make([]byte, 100))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return err == nil
}

// TestListenPortTaken: a host port already bound fails Listen with an
// error naming the port and the way out, and nothing it bound before
// stays bound.
func TestListenPortTaken(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().(*net.TCPAddr).Port
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	first := free.Addr().(*net.TCPAddr).Port
	free.Close()
	files, err := Listen([]string{fmt.Sprintf("%d:80", first), fmt.Sprintf("%d:81", taken)}, nil)
	if err == nil {
		for _, f := range files {
			f.Close()
		}
		t.Fatal("Listen on a taken port succeeded")
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("host port %d is taken", taken)) || !strings.Contains(err.Error(), "dev.gvx.nat") {
		t.Errorf("error %q does not name the taken port and the way out", err)
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", first))
	if err != nil {
		t.Fatalf("the first port stayed bound after the failed Listen: %v", err)
	}
	l.Close()
}
