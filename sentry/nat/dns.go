package nat

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/gvxrun/gvx/api"
)

const dnsTimeout = 5 * time.Second

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
			reply, err := n.resolve(buf[:k])
			if err != nil {
				log.Infof("nat: dns: %v", err)
				continue
			}
			n.learn(reply)
			_, _ = guest.Write(reply)
		}
	}()
	return true
}

// resolve forwards query to the first resolver that answers.
func (n *NAT) resolve(query []byte) ([]byte, error) {
	if len(n.dns) == 0 {
		return nil, fmt.Errorf("no resolvers: set [nat] dns in the gvx config or dns in %s", api.AnnotationNAT)
	}
	var last error
	for _, server := range n.dns {
		ctx, cancel := context.WithTimeout(context.Background(), dnsTimeout)
		reply, err := exchange(ctx, server, query)
		cancel()
		if err == nil {
			return reply, nil
		}
		last = err
	}
	return nil, fmt.Errorf("no resolver answered (%s): %w", strings.Join(n.dns, ", "), last)
}

func exchange(ctx context.Context, server string, query []byte) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", server)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
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
