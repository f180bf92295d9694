package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
)

// Network modes (the config's network key and AnnotationNetwork).
const (
	NetworkSandbox = "sandbox" // gVisor's netstack on the task's network namespace
	NetworkNone    = "none"    // loopback only
	NetworkHost    = "host"    // the host's network stack
	NetworkNAT     = "nat"     // gvx's userspace NAT (docs/network.md)
)

// AnnotationNetwork, on a task's spec, picks its network mode over the
// config's: one of the Network* values.
const AnnotationNetwork = "dev.gvx.network"

// AnnotationNAT, on a task's spec, carries its NAT settings (a NAT as
// JSON; unknown keys are errors). A caller sets the fields it wants over
// the config's [nat]; the shim writes the merged, checked NAT back for
// gvx-sentry.
const AnnotationNAT = "dev.gvx.nat"

// NATCommand is gvx-sentry's internal subcommand (argv[1]) of a sandbox's
// NAT process.
const NATCommand = "gvx-nat"

// The addresses a NAT sandbox sees (docs/network.md).
var (
	NATGuest   = netip.MustParseAddr("10.0.2.15") // the guest's eth0
	NATGateway = netip.MustParseAddr("10.0.2.2")  // the NAT; the host's loopback when allowed
	NATDNS     = netip.MustParseAddr("10.0.2.3")  // the NAT's DNS server
	NATPrefix  = netip.MustParsePrefix("10.0.2.0/24")
)

// NATMTU is the guest link's MTU: loopback's size, not a wire's. Both
// ends are gVisor netstacks in processes of one host and the NAT carries
// the bytes on host sockets, so no path MTU applies; big packets cut the
// per-packet cost of the two stacks (≈ 8× throughput against 1500 in
// sentry/nat's BenchmarkUpload).
const NATMTU = 65520

// NAT is one sandbox's NAT: published ports, egress policy, resolvers.
type NAT struct {
	// Ports publishes guest ports on the host: "HOSTPORT:GUESTPORT",
	// "ADDR:HOSTPORT:GUESTPORT" (either with /tcp or /udp) or
	// "unix:/path.sock:GUESTPORT".
	Ports []string `json:"ports,omitempty"`
	// Egress is the policy on the guest's outgoing flows.
	Egress *Egress `json:"egress,omitempty"`
	// DNS lists the resolvers (host:port, reached from the host) the
	// NAT's DNS server at 10.0.2.3 forwards to; empty: the host's
	// /etc/resolv.conf.
	DNS []string `json:"dns,omitempty"`
	// MaxConnections caps the flows the sandbox has open at once (TCP
	// connections and UDP flows, egress and published; DNS to 10.0.2.3
	// is not counted): a new one over the cap is refused as the policy
	// refuses (RST / ICMP port unreachable; a published port's host
	// connection is closed) and counted. 0: no cap.
	MaxConnections int `json:"max_connections,omitempty"`
	// Bandwidth caps the sandbox's traffic in bytes per second, each
	// way: guest → host and host → guest each have one token bucket
	// shared by all the sandbox's flows. 0: no cap.
	Bandwidth int64 `json:"bandwidth,omitempty"`
	// Owner is the host uid:gid unix sockets are created for (the shim
	// fills it in: the owner of each socket's directory).
	Owner []Owner `json:"owner,omitempty"`
}

// MinNATBandwidth is the smallest Bandwidth cap accepted (1 KiB/s).
const MinNATBandwidth = 1 << 10

// Owner is the owner of Ports' unix socket at Path.
type Owner struct {
	Path string `json:"path"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
}

// Egress is the egress policy (docs/network.md#policy).
type Egress struct {
	// Default is what happens to a flow no rule matches: "allow" (the
	// default) or "deny".
	Default string `json:"default,omitempty"`
	// Allow and Deny are rules: CIDR, address, DNS name or *.name, each
	// with an optional :port ([v6]:port for IPv6).
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// Narrow, if set, is a second policy every flow must pass as well:
	// what the one who asked for the sandbox made of the operator's
	// policy above (gvx serve puts an E2B create's allow_internet_access
	// and network.allowOut/denyOut here). It can only refuse more.
	Narrow *Narrow `json:"narrow,omitempty"`
}

// HasPolicy reports whether e sets a policy of its own (a default or
// rules), beside any narrowing.
func (e *Egress) HasPolicy() bool {
	return e.Default != "" || e.Allow != nil || e.Deny != nil
}

// Narrow is a narrowing of an egress policy, in E2B's order: an allow
// rule admits, else a deny rule refuses, else Default decides. It has no
// built-in ranges (the policy it narrows has them), so its allow rules
// open nothing that policy refuses.
type Narrow struct {
	// Default is "allow" (the default) or "deny".
	Default string `json:"default,omitempty"`
	// Allow and Deny are rules, as Egress's.
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Check validates n's default and rules.
func (n *Narrow) Check() error {
	if n == nil {
		return nil
	}
	return checkPolicy("egress.narrow", n.Default, n.Allow, n.Deny)
}

// checkPolicy validates a policy's default and rules (what names the
// policy in errors).
func checkPolicy(what, def string, allow, deny []string) error {
	switch def {
	case "", "allow", "deny":
	default:
		return fmt.Errorf("%s.default %q: want allow or deny", what, def)
	}
	for _, list := range [][]string{allow, deny} {
		for _, r := range list {
			if _, err := ParseRule(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// DecodeNAT parses an AnnotationNAT value, refusing unknown keys and
// checking every mapping and rule.
func DecodeNAT(v string) (NAT, error) {
	var n NAT
	dec := json.NewDecoder(bytes.NewReader([]byte(v)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&n); err != nil {
		return NAT{}, fmt.Errorf("annotation %s: %w (known keys: ports, egress.default, egress.allow, egress.deny, egress.narrow.{default,allow,deny}, dns, max_connections, bandwidth)", AnnotationNAT, err)
	}
	if err := n.Check(); err != nil {
		return NAT{}, fmt.Errorf("annotation %s: %w", AnnotationNAT, err)
	}
	return n, nil
}

// EncodeNAT is the AnnotationNAT value of n.
func EncodeNAT(n NAT) (string, error) {
	data, err := json.Marshal(n)
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", AnnotationNAT, err)
	}
	return string(data), nil
}

// Check validates every port mapping, rule and resolver of n.
func (n NAT) Check() error {
	seen := map[string]bool{}
	for _, s := range n.Ports {
		p, err := ParsePort(s)
		if err != nil {
			return err
		}
		if k := p.hostKey(); seen[k] {
			return fmt.Errorf("port %q: host side %s is published twice", s, k)
		} else {
			seen[k] = true
		}
	}
	if e := n.Egress; e != nil {
		if err := checkPolicy("egress", e.Default, e.Allow, e.Deny); err != nil {
			return err
		}
		if err := e.Narrow.Check(); err != nil {
			return err
		}
	}
	if n.MaxConnections < 0 {
		return fmt.Errorf("max_connections %d: want a positive number of flows, or 0 for no cap", n.MaxConnections)
	}
	if n.Bandwidth < 0 || n.Bandwidth > 0 && n.Bandwidth < MinNATBandwidth {
		return fmt.Errorf("bandwidth %d: want bytes per second, at least %d (1 KiB/s), or 0 for no cap", n.Bandwidth, MinNATBandwidth)
	}
	for _, d := range n.DNS {
		if _, err := netip.ParseAddrPort(d); err != nil {
			return fmt.Errorf("dns %q: want ADDR:PORT (e.g. 127.0.0.1:53): %w", d, err)
		}
	}
	return nil
}

// Port is one published port.
type Port struct {
	Proto     string     // "tcp" or "udp"
	Host      netip.Addr // the host address (unset for Unix)
	HostPort  uint16
	Unix      string // the host socket's path, for unix:
	GuestPort uint16
}

func (p Port) hostKey() string {
	if p.Unix != "" {
		return "unix:" + p.Unix
	}
	return p.Proto + "/" + netip.AddrPortFrom(p.Host, p.HostPort).String()
}

// ParsePort parses a Ports entry.
func ParsePort(s string) (Port, error) {
	bad := func(why string) (Port, error) {
		return Port{}, fmt.Errorf("port %q: %s; want HOSTPORT:GUESTPORT[/tcp|/udp], ADDR:HOSTPORT:GUESTPORT[/tcp|/udp] or unix:/path.sock:GUESTPORT", s, why)
	}
	if rest, ok := strings.CutPrefix(s, "unix:"); ok {
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			return bad("no guest port")
		}
		path := rest[:i]
		gp, err := portNumber(rest[i+1:])
		if err != nil {
			return bad(err.Error())
		}
		if !filepath.IsAbs(path) || filepath.Clean(path) != path {
			return bad("the socket path must be absolute and clean")
		}
		if len(path) > 107 {
			return bad("the socket path is longer than a unix socket address allows (107 bytes)")
		}
		return Port{Proto: "tcp", Unix: path, GuestPort: gp}, nil
	}
	p := Port{Proto: "tcp", Host: netip.MustParseAddr("127.0.0.1")}
	if body, proto, ok := strings.Cut(s, "/"); ok {
		if proto != "tcp" && proto != "udp" {
			return bad("protocol " + proto + " is neither tcp nor udp")
		}
		s, p.Proto = body, proto
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return bad("no guest port")
	}
	gp, err := portNumber(s[i+1:])
	if err != nil {
		return bad(err.Error())
	}
	host := s[:i]
	if j := strings.LastIndexByte(host, ':'); j >= 0 {
		a, err := netip.ParseAddr(strings.Trim(host[:j], "[]"))
		if err != nil {
			return bad("host address: " + err.Error())
		}
		p.Host, host = a, host[j+1:]
	}
	hp, err := portNumber(host)
	if err != nil {
		return bad(err.Error())
	}
	p.HostPort, p.GuestPort = hp, gp
	return p, nil
}

func portNumber(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a port number (1-65535)", s)
	}
	return uint16(n), nil
}

// Rule is one parsed egress rule: a prefix or a DNS name, and a port (0:
// any).
type Rule struct {
	Prefix netip.Prefix // valid unless Name is set
	Name   string       // lower case, without a trailing dot; "*.x" matches below x
	Port   uint16
}

// ParseRule parses an egress rule: CIDR, address or DNS name, with an
// optional :port (IPv6 in brackets when with a port).
func ParseRule(s string) (Rule, error) {
	bad := func(why string) (Rule, error) {
		return Rule{}, fmt.Errorf("egress rule %q: %s; want CIDR[:PORT], ADDR[:PORT], NAME[:PORT] or *.NAME[:PORT] ([v6]:PORT for IPv6)", s, why)
	}
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return bad("unclosed [")
		}
		host, port = s[1:end], strings.TrimPrefix(s[end+1:], ":")
		if port == "" && len(s) > end+1 {
			return bad("junk after ]")
		}
	} else if strings.Count(s, ":") == 1 {
		host, port, _ = strings.Cut(s, ":")
	}
	var r Rule
	if port != "" {
		p, err := portNumber(port)
		if err != nil {
			return bad(err.Error())
		}
		r.Port = p
	}
	if pfx, err := netip.ParsePrefix(host); err == nil {
		r.Prefix = pfx.Masked()
		return r, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		r.Prefix = netip.PrefixFrom(a, a.BitLen())
		return r, nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if !validName(strings.TrimPrefix(name, "*.")) {
		return bad("neither an address, a CIDR nor a DNS name")
	}
	r.Name = name
	return r, nil
}

func validName(n string) bool {
	if n == "" || len(n) > 253 {
		return false
	}
	for _, l := range strings.Split(n, ".") {
		if !labelOK(l) {
			return false
		}
	}
	return true
}

func labelOK(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for _, c := range l {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// NATStats is what a NAT process counts, in its SentryRoot.NATStats file.
type NATStats struct {
	Pid         int   `json:"pid"`
	Allowed     int64 `json:"allowed"`      // flows the policy let out
	Refused     int64 `json:"refused"`      // flows refused, every reason (RST / ICMP unreachable)
	HostSockets int64 `json:"host_sockets"` // host sockets opened for the guest's flows
	DNSQueries  int64 `json:"dns_queries"`
	Published   int64 `json:"published"` // connections accepted on published ports
	// RefusedLimit counts the refusals (of Refused) for MaxConnections;
	// the rest are the policy's.
	RefusedLimit int64 `json:"refused_limit"`
	Open         int64 `json:"open"`      // flows open now (what MaxConnections caps)
	BytesOut     int64 `json:"bytes_out"` // guest → host bytes relayed
	BytesIn      int64 `json:"bytes_in"`  // host → guest bytes relayed
}
