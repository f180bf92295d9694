// Package policy decides which of a NAT sandbox's outgoing flows may leave.
//
// A Policy is built from an api.Egress and asked, for each new flow and
// before any host socket exists, whether the destination the guest named
// (an address and port) may be reached. Names in rules match the
// addresses the NAT's own DNS server handed out for them (Learn). The
// order of the decision (docs/network.md#policy): a deny rule refuses; an
// allow rule admits, except that a built-in range (host loopback, private,
// link-local with the metadata address, multicast…) yields only to an
// address rule that lies inside it; then the built-in ranges refuse; then
// the default decides. A flow that policy admits must then pass the
// narrowing, if the policy has one (api.Narrow: allow rules first, then
// deny rules, then its default).
package policy

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gvxrun/gvx/api"
)

// A Decision is the policy's answer about one flow.
type Decision struct {
	Allow bool
	// Reason names the rule or range that decided, for logs.
	Reason string
}

// builtin are the ranges refused unless an address rule inside them
// allows them (Policy.Decide).
var builtin = []struct {
	name   string
	prefix netip.Prefix
}{
	// Most specific first: a rule opens only the first range that holds
	// the destination.
	{"host loopback (10.0.2.2)", netip.PrefixFrom(api.NATGateway, 32)},
	{"metadata", netip.MustParsePrefix("169.254.169.254/32")},
	{"this-network", netip.MustParsePrefix("0.0.0.0/8")},
	{"loopback", netip.MustParsePrefix("127.0.0.0/8")},
	{"private", netip.MustParsePrefix("10.0.0.0/8")},
	{"private", netip.MustParsePrefix("172.16.0.0/12")},
	{"private", netip.MustParsePrefix("192.168.0.0/16")},
	{"shared", netip.MustParsePrefix("100.64.0.0/10")},
	{"link-local", netip.MustParsePrefix("169.254.0.0/16")},
	{"multicast", netip.MustParsePrefix("224.0.0.0/4")},
	{"reserved", netip.MustParsePrefix("240.0.0.0/4")},
	{"loopback", netip.MustParsePrefix("::1/128")},
	{"unspecified", netip.MustParsePrefix("::/128")},
	{"v4-mapped", netip.MustParsePrefix("::ffff:0:0/96")},
	{"private", netip.MustParsePrefix("fc00::/7")},
	{"link-local", netip.MustParsePrefix("fe80::/10")},
	{"multicast", netip.MustParsePrefix("ff00::/8")},
}

// Policy is one sandbox's egress policy. It is safe for concurrent use.
type Policy struct {
	defaultAllow bool
	allow, deny  []api.Rule
	narrow       atomic.Pointer[narrow] // SetNarrow replaces it

	mu    sync.RWMutex
	names map[netip.Addr]map[string]bool // addresses the NAT's DNS handed out, by name
}

// New builds the policy e describes (nil: the defaults).
func New(e *api.Egress) (*Policy, error) {
	p := &Policy{defaultAllow: true, names: map[netip.Addr]map[string]bool{}}
	if e == nil {
		return p, nil
	}
	switch e.Default {
	case "", "allow":
	case "deny":
		p.defaultAllow = false
	default:
		return nil, fmt.Errorf("egress.default %q: want allow or deny", e.Default)
	}
	var err error
	if p.allow, err = parseRules(e.Allow); err != nil {
		return nil, err
	}
	if p.deny, err = parseRules(e.Deny); err != nil {
		return nil, err
	}
	if err := p.SetNarrow(e.Narrow); err != nil {
		return nil, err
	}
	return p, nil
}

// SetNarrow replaces the policy's narrowing (nil: none). Flows decided
// from then on obey it.
func (p *Policy) SetNarrow(n *api.Narrow) error {
	if n == nil {
		p.narrow.Store(nil)
		return nil
	}
	if err := n.Check(); err != nil {
		return err
	}
	nw := &narrow{defaultAllow: n.Default != "deny"}
	nw.allow, _ = parseRules(n.Allow) // Check parsed them
	nw.deny, _ = parseRules(n.Deny)
	p.narrow.Store(nw)
	return nil
}

// narrow is an api.Narrow, parsed.
type narrow struct {
	defaultAllow bool
	allow, deny  []api.Rule
}

func parseRules(in []string) ([]api.Rule, error) {
	var out []api.Rule
	for _, s := range in {
		r, err := api.ParseRule(s)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Learn records that the NAT's DNS answered name with addrs, so that name
// rules match them.
func (p *Policy) Learn(name string, addrs []netip.Addr) {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range addrs {
		a = a.Unmap()
		if p.names[a] == nil {
			p.names[a] = map[string]bool{}
		}
		p.names[a][name] = true
	}
}

// Decide says whether the guest may reach dst:port. It never touches the
// network.
func (p *Policy) Decide(dst netip.Addr, port uint16) Decision {
	dst = dst.Unmap()
	d := p.decide(dst, port)
	nw := p.narrow.Load()
	if !d.Allow || nw == nil {
		return d
	}
	for _, r := range nw.allow {
		if p.match(r, dst, port) {
			return d
		}
	}
	for _, r := range nw.deny {
		if p.match(r, dst, port) {
			return Decision{false, "narrowed: deny rule " + ruleString(r)}
		}
	}
	if !nw.defaultAllow {
		return Decision{false, "narrowed: default deny"}
	}
	return d
}

// decide is the operator's policy's decision, before any narrowing.
func (p *Policy) decide(dst netip.Addr, port uint16) Decision {
	for _, r := range p.deny {
		if p.match(r, dst, port) {
			return Decision{false, "deny rule " + ruleString(r)}
		}
	}
	in, inPrefix := "", netip.Prefix{}
	for _, b := range builtin {
		if b.prefix.Contains(dst) {
			in, inPrefix = b.name, b.prefix
			break
		}
	}
	for _, r := range p.allow {
		if !p.match(r, dst, port) {
			continue
		}
		if in == "" {
			return Decision{true, "allow rule " + ruleString(r)}
		}
		// A built-in range yields only to an address rule inside it.
		if r.Name == "" && inPrefix.Bits() <= r.Prefix.Bits() && inPrefix.Contains(r.Prefix.Addr()) {
			return Decision{true, "allow rule " + ruleString(r)}
		}
	}
	if in != "" {
		return Decision{false, in + " range"}
	}
	if p.defaultAllow {
		return Decision{true, "default allow"}
	}
	return Decision{false, "default deny"}
}

func (p *Policy) match(r api.Rule, dst netip.Addr, port uint16) bool {
	if r.Port != 0 && r.Port != port {
		return false
	}
	if r.Name == "" {
		return r.Prefix.Contains(dst)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for n := range p.names[dst] {
		if n == r.Name || strings.HasPrefix(r.Name, "*.") && strings.HasSuffix(n, r.Name[1:]) {
			return true
		}
	}
	return false
}

func ruleString(r api.Rule) string {
	s := r.Name
	if s == "" {
		s = r.Prefix.String()
	}
	if r.Port != 0 {
		s = fmt.Sprintf("%s:%d", s, r.Port)
	}
	return s
}
