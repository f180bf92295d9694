package nat

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/gvxrun/gvx/api"
)

const dnsTimeout = 5 * time.Second

// dnsTCPIdle closes a guest's TCP connection to 10.0.2.3 that sent no
// query for this long (RFC 7766 leaves the idle timeout to the server).
const dnsTCPIdle = 10 * time.Second

// dnsTCPInflight is how many queries of one guest TCP connection are
// resolved at once; the next waits for one of them to be answered.
const dnsTCPInflight = 16

// serveDNS answers one guest flow to 10.0.2.3:53: each query is forwarded
// to the resolvers in turn, and each answer's addresses are learned by the
// policy under the names that led to them.
func (n *NAT) serveDNS(r *udp.ForwarderRequest) bool {
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		return true
	}
	guest := gonet.NewUDPConn(&wq, ep)
	go func() {
		defer guest.Close()
		buf := make([]byte, 65535)
		for {
			_ = guest.SetReadDeadline(time.Now().Add(udpIdle))
			k, err := guest.Read(buf)
			if err != nil {
				return
			}
			n.stats.add(func(s *api.NATStats) { s.DNSQueries++ })
			reply, ok := n.answer("udp", buf[:k])
			if ok {
				_, _ = guest.Write(reply)
			}
		}
	}()
	return true
}

// serveDNSTCP answers one guest TCP connection to 10.0.2.3:53 (RFC 7766:
// each message prefixed by its 2-byte length, any number of queries per
// connection, pipelined). Each query is forwarded to the resolvers over
// TCP — a guest retries over TCP when a UDP answer was truncated, so the
// resolver is asked the same way — and its answer is learned by the
// policy as over UDP. Answers are written as they come, so they may be
// out of order (the guest matches them by ID).
func (n *NAT) serveDNSTCP(r *tcp.ForwarderRequest) {
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		r.Complete(true)
		return
	}
	r.Complete(false)
	guest := gonet.NewTCPConn(&wq, ep)
	go n.dnsStream(guest)
}

// dnsStream serves the queries of one guest TCP connection until the
// guest ends it or is idle for dnsTCPIdle, then answers what is in flight
// and closes it.
func (n *NAT) dnsStream(guest net.Conn) {
	defer guest.Close()
	var (
		wmu      sync.Mutex
		wg       sync.WaitGroup
		inflight = make(chan struct{}, dnsTCPInflight)
	)
	defer wg.Wait()
	for {
		_ = guest.SetReadDeadline(time.Now().Add(dnsTCPIdle))
		query, err := readDNSMsg(guest)
		if err != nil {
			return
		}
		n.stats.add(func(s *api.NATStats) { s.DNSQueries++ })
		inflight <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-inflight }()
			reply, ok := n.answer("tcp", query)
			if !ok {
				return
			}
			wmu.Lock()
			defer wmu.Unlock()
			_ = guest.SetWriteDeadline(time.Now().Add(dnsTimeout))
			if err := writeDNSMsg(guest, reply); err != nil {
				log.Debugf("nat: dns over tcp: answer: %v", err)
			}
		}()
	}
}

// answer resolves query over network ("udp" or "tcp") and learns the
// reply. When no resolver answers it is a SERVFAIL of the query's ID,
// so the guest does not wait out its timeout; a query too malformed to
// answer returns false.
func (n *NAT) answer(network string, query []byte) ([]byte, bool) {
	reply, err := n.resolve(network, query)
	if err != nil {
		log.Infof("nat: dns: %v", err)
		return servFail(query)
	}
	n.learn(reply)
	return reply, true
}

// servFail is the SERVFAIL answer to query, its questions echoed.
func servFail(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil, false
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return nil, false
	}
	m := dnsmessage.Message{Header: dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: dnsmessage.RCodeServerFailure}, Questions: qs}
	out, err := m.Pack()
	return out, err == nil
}

// resolve forwards query to the first resolver that answers, over
// network.
func (n *NAT) resolve(network string, query []byte) ([]byte, error) {
	if len(n.dns) == 0 {
		return nil, fmt.Errorf("no resolvers: set [nat] dns in the gvx config or dns in %s", api.AnnotationNAT)
	}
	var last error
	for _, server := range n.dns {
		ctx, cancel := context.WithTimeout(context.Background(), dnsTimeout)
		reply, err := exchange(ctx, network, server, query)
		cancel()
		if err == nil {
			return reply, nil
		}
		last = err
	}
	return nil, fmt.Errorf("no resolver answered over %s (%s): %w", network, strings.Join(n.dns, ", "), last)
}

// exchange sends query to server and reads its reply: a datagram each
// over "udp", length-prefixed messages on a connection of its own over
// "tcp".
func exchange(ctx context.Context, network, server string, query []byte) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, server)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if network == "tcp" {
		if err := writeDNSMsg(c, query); err != nil {
			return nil, fmt.Errorf("query %s: %w", server, err)
		}
		reply, err := readDNSMsg(c)
		if err != nil {
			return nil, fmt.Errorf("answer from %s: %w", server, err)
		}
		return reply, nil
	}
	if _, err := c.Write(query); err != nil {
		return nil, err
	}
	buf := make([]byte, 65535)
	k, err := c.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:k], nil
}

// readDNSMsg reads one message of a DNS TCP stream: a 2-byte big-endian
// length, then that many bytes.
func readDNSMsg(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// writeDNSMsg writes msg to a DNS TCP stream, its length first, in one
// write.
func writeDNSMsg(w io.Writer, msg []byte) error {
	if len(msg) > 0xffff {
		return fmt.Errorf("dns message of %d bytes", len(msg))
	}
	b := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(b, uint16(len(msg)))
	copy(b[2:], msg)
	_, err := w.Write(b)
	return err
}

// learn teaches the policy the A/AAAA answers of reply, following CNAMEs
// back to the name the guest asked for.
func (n *NAT) learn(reply []byte) {
	var p dnsmessage.Parser
	if _, err := p.Start(reply); err != nil {
		return
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) == 0 {
		return
	}
	answers, err := p.AllAnswers()
	if err != nil {
		return
	}
	alias := map[string]string{} // a CNAME target → the name pointing at it
	addrs := map[string][]netip.Addr{}
	for _, a := range answers {
		name := strings.ToLower(a.Header.Name.String())
		switch b := a.Body.(type) {
		case *dnsmessage.CNAMEResource:
			alias[strings.ToLower(b.CNAME.String())] = name
		case *dnsmessage.AResource:
			addrs[name] = append(addrs[name], netip.AddrFrom4(b.A))
		case *dnsmessage.AAAAResource:
			addrs[name] = append(addrs[name], netip.AddrFrom16(b.AAAA))
		}
	}
	for name, as := range addrs {
		for seen := 0; name != "" && seen < 16; seen++ {
			n.policy.Learn(name, as)
			name = alias[name]
		}
	}
}

// hostResolvers lists the nameservers of a resolv.conf as ADDR:53.
func hostResolvers(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("nat dns: no resolvers configured ([nat] dns) and %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil {
				out = append(out, netip.AddrPortFrom(a, 53).String())
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("nat dns: no resolvers configured ([nat] dns) and %s names none", path)
	}
	return out, nil
}
