package nat

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/gvxrun/gvx/api"
)

// tcpDNS is a DNS server on one 127.0.0.1 port, UDP and TCP (RFC 7766
// framing, any number of queries per connection), answering A queries
// from zone. Over UDP it answers names in truncate with the TC bit and
// no records, as a server does whose answer does not fit a datagram.
type tcpDNS struct {
	addr     string
	tcpConns atomic.Int64
	tcpQs    atomic.Int64
	udpQs    atomic.Int64
}

func startTCPDNS(t *testing.T, zone map[string][]netip.Addr, truncate map[string]bool) *tcpDNS {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	pc, err := net.ListenPacket("udp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	d := &tcpDNS{addr: ln.Addr().String()}
	answer := func(q []byte, udp bool) []byte {
		var m dnsmessage.Message
		if m.Unpack(q) != nil || len(m.Questions) != 1 {
			return nil
		}
		name := m.Questions[0].Name
		m.Header.Response = true
		if udp && truncate[name.String()] {
			m.Header.Truncated = true
		} else {
			for _, a := range zone[name.String()] {
				m.Answers = append(m.Answers, dnsmessage.Resource{
					Header: dnsmessage.ResourceHeader{Name: name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5},
					Body:   &dnsmessage.AResource{A: a.As4()},
				})
			}
		}
		out, _ := m.Pack()
		return out
	}
	go func() {
		buf := make([]byte, 1500)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			d.udpQs.Add(1)
			if out := answer(buf[:k], true); out != nil {
				pc.WriteTo(out, from)
			}
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d.tcpConns.Add(1)
			go func() {
				defer c.Close()
				for {
					q, err := readDNSMsg(c)
					if err != nil {
						return
					}
					d.tcpQs.Add(1)
					if out := answer(q, false); out != nil {
						writeDNSMsg(c, out)
					}
				}
			}()
		}
	}()
	return d
}

func query(id uint16, name string) []byte {
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	b, err := q.Pack()
	if err != nil {
		panic(err)
	}
	return b
}

func dialDNSTCP(t *testing.T, g *stack.Stack) *gonet.TCPConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := gonet.DialContextTCP(ctx, g, full(api.NATDNS, 53), ipv4.ProtocolNumber)
	if err != nil {
		t.Fatalf("dial 10.0.2.3:53 over TCP: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// addrsOf is the A records of a reply, sorted, and its header.
func addrsOf(t *testing.T, reply []byte) (dnsmessage.Header, []string) {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(reply); err != nil {
		t.Fatalf("unpack answer: %v", err)
	}
	var out []string
	for _, a := range m.Answers {
		if r, ok := a.Body.(*dnsmessage.AResource); ok {
			out = append(out, netip.AddrFrom4(r.A).String())
		}
	}
	sort.Strings(out)
	return m.Header, out
}

// TestDNSTruncatedThenTCP: a name whose UDP answer is truncated reaches
// the guest with TC set and no records; the guest's retry over TCP to
// 10.0.2.3:53 is forwarded to the resolver over TCP and gets every
// record, and the policy learns them: a name rule then admits them.
func TestDNSTruncatedThenTCP(t *testing.T) {
	var big []netip.Addr
	for i := 1; i <= 40; i++ {
		big = append(big, netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}))
	}
	srv := startTCPDNS(t, map[string][]netip.Addr{"big.test.": big}, map[string]bool{"big.test.": true})
	g, n, d := setup(t, api.NAT{DNS: []string{srv.addr}, Egress: &api.Egress{Default: "deny", Allow: []string{"big.test:443"}}})

	u, err := gonet.DialUDP(g, nil, &tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(api.NATDNS.As4()), Port: 53}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	u.Write(query(1, "big.test."))
	u.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 65535)
	k, err := u.Read(buf)
	if err != nil {
		t.Fatalf("UDP answer: %v", err)
	}
	if h, as := addrsOf(t, buf[:k]); !h.Truncated || len(as) != 0 {
		t.Fatalf("UDP answer: truncated %v with %d records, want truncated with none", h.Truncated, len(as))
	}
	// Nothing learned from the truncated answer yet.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := gonet.DialContextTCP(ctx, g, full(big[7], 443), ipv4.ProtocolNumber); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("dial %s before the TCP answer: %v, want refused", big[7], err)
	}

	c := dialDNSTCP(t, g)
	if err := writeDNSMsg(c, query(2, "big.test.")); err != nil {
		t.Fatal(err)
	}
	reply, err := readDNSMsg(c)
	if err != nil {
		t.Fatalf("TCP answer: %v", err)
	}
	h, as := addrsOf(t, reply)
	if h.ID != 2 || h.Truncated || len(as) != len(big) {
		t.Fatalf("TCP answer: id %d truncated %v, %d records; want id 2, not truncated, %d records", h.ID, h.Truncated, len(as), len(big))
	}
	if srv.tcpQs.Load() != 1 || srv.udpQs.Load() != 1 {
		t.Errorf("the resolver saw %d UDP and %d TCP queries, want 1 each", srv.udpQs.Load(), srv.tcpQs.Load())
	}
	conn, err := gonet.DialContextTCP(ctx, g, full(big[7], 443), ipv4.ProtocolNumber)
	if err != nil {
		t.Fatalf("dial %s, learned over TCP: %v", big[7], err)
	}
	got, _ := io.ReadAll(conn)
	conn.Close()
	if want := "ok from " + big[7].String() + ":443"; string(got) != want {
		t.Errorf("allowed flow read %q, want %q", got, want)
	}
	if l := d.list(); len(l) != 1 {
		t.Errorf("host sockets asked for: %q, want only the allowed flow's", l)
	}
	if s := n.stats.Get(); s.DNSQueries != 2 || s.Refused != 1 || s.Allowed != 1 {
		t.Errorf("stats %+v, want 2 DNS queries, 1 refused, 1 allowed", s)
	}
}

// TestDNSTCPPipelined: several queries written at once on one TCP
// connection to 10.0.2.3 are each answered (matched by ID), the
// connection stays usable for more, and a query no resolver can answer
// gets SERVFAIL rather than silence.
func TestDNSTCPPipelined(t *testing.T) {
	zone := map[string][]netip.Addr{}
	const names = 8
	for i := 0; i < names; i++ {
		zone[fmt.Sprintf("h%d.test.", i)] = []netip.Addr{netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)})}
	}
	srv := startTCPDNS(t, zone, nil)
	g, n, _ := setup(t, api.NAT{DNS: []string{srv.addr}})
	c := dialDNSTCP(t, g)
	var batch []byte
	for i := 0; i < names; i++ {
		q := query(uint16(100+i), fmt.Sprintf("h%d.test.", i))
		batch = append(batch, byte(len(q)>>8), byte(len(q)))
		batch = append(batch, q...)
	}
	if _, err := c.Write(batch); err != nil {
		t.Fatal(err)
	}
	got := map[uint16]string{}
	for i := 0; i < names; i++ {
		reply, err := readDNSMsg(c)
		if err != nil {
			t.Fatalf("answer %d of %d: %v", i+1, names, err)
		}
		h, as := addrsOf(t, reply)
		if len(as) != 1 {
			t.Fatalf("answer id %d: %d records", h.ID, len(as))
		}
		got[h.ID] = as[0]
	}
	for i := 0; i < names; i++ {
		if want := fmt.Sprintf("198.51.100.%d", i+1); got[uint16(100+i)] != want {
			t.Errorf("answer to id %d: %q, want %s", 100+i, got[uint16(100+i)], want)
		}
	}
	// The same connection again, after the batch.
	writeDNSMsg(c, query(200, "h3.test."))
	reply, err := readDNSMsg(c)
	if err != nil {
		t.Fatalf("a query after the batch: %v", err)
	}
	if h, as := addrsOf(t, reply); h.ID != 200 || len(as) != 1 || as[0] != "198.51.100.4" {
		t.Errorf("a query after the batch: id %d %q", h.ID, as)
	}
	if s := n.stats.Get(); s.DNSQueries != names+1 {
		t.Errorf("DNS queries counted %d, want %d", s.DNSQueries, names+1)
	}
	if srv.tcpQs.Load() != names+1 || srv.udpQs.Load() != 0 {
		t.Errorf("the resolver saw %d TCP and %d UDP queries, want %d over TCP only", srv.tcpQs.Load(), srv.udpQs.Load(), names+1)
	}
	// The guest half-closes: what it asked is still answered, then the
	// NAT closes its side.
	writeDNSMsg(c, query(201, "h5.test."))
	c.CloseWrite()
	reply, err = readDNSMsg(c)
	if err != nil {
		t.Fatalf("the answer after the guest's half-close: %v", err)
	}
	if h, _ := addrsOf(t, reply); h.ID != 201 {
		t.Errorf("after the half-close: answer id %d, want 201", h.ID)
	}
	if _, err := readDNSMsg(c); err != io.EOF {
		t.Errorf("after the last answer: %v, want EOF", err)
	}
}

// TestDNSTCPServFail: with no resolver reachable a TCP query is answered
// SERVFAIL at once; TCP to 10.0.2.3 on another port is refused.
func TestDNSTCPServFail(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	g, n, _ := setup(t, api.NAT{DNS: []string{dead}})
	c := dialDNSTCP(t, g)
	writeDNSMsg(c, query(9, "x.test."))
	reply, err := readDNSMsg(c)
	if err != nil {
		t.Fatalf("answer: %v", err)
	}
	if h, _ := addrsOf(t, reply); h.ID != 9 || h.RCode != dnsmessage.RCodeServerFailure {
		t.Errorf("answer id %d rcode %v, want id 9 SERVFAIL", h.ID, h.RCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := gonet.DialContextTCP(ctx, g, full(api.NATDNS, 54), ipv4.ProtocolNumber); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("dial 10.0.2.3:54: %v, want refused", err)
	}
	if s := n.stats.Get(); s.Refused != 1 || s.DNSQueries != 1 {
		t.Errorf("stats %+v, want 1 refused, 1 DNS query", s)
	}
}
