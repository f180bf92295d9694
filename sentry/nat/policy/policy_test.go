package policy

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestDefaults(t *testing.T) {
	p, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dst    string
		allow  bool
		reason string
	}{
		{"93.184.216.34", true, "default allow"},
		{"2606:4700::1111", true, "default allow"},
		{"10.0.2.2", false, "host loopback"},
		{"127.0.0.1", false, "loopback"},
		{"10.1.2.3", false, "private"},
		{"172.16.0.1", false, "private"},
		{"192.168.1.1", false, "private"},
		{"169.254.169.254", false, "metadata"},
		{"169.254.1.1", false, "link-local"},
		{"100.64.0.1", false, "shared"},
		{"0.0.0.0", false, "this-network"},
		{"224.0.0.1", false, "multicast"},
		{"::1", false, "loopback"},
		{"fe80::1", false, "link-local"},
		{"fd00::1", false, "private"},
		{"::ffff:127.0.0.1", false, "loopback"}, // unmapped first
	} {
		d := p.Decide(addr(tc.dst), 80)
		if d.Allow != tc.allow || !strings.Contains(d.Reason, tc.reason) {
			t.Errorf("Decide(%s) = %+v, want allow=%v reason ~ %q", tc.dst, d, tc.allow, tc.reason)
		}
	}
}

func TestRules(t *testing.T) {
	p, err := New(&api.Egress{
		Default: "deny",
		Allow:   []string{"10.0.2.2:8080", "0.0.0.0/0:443", "192.168.7.0/24", "pypi.org", "*.example.com:80", "[2001:db8::1]:53"},
		Deny:    []string{"198.51.100.0/24", "bad.example.com"},
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Learn("PyPI.org.", []netip.Addr{addr("151.101.0.223")})
	p.Learn("a.example.com", []netip.Addr{addr("203.0.113.9")})
	p.Learn("bad.example.com", []netip.Addr{addr("203.0.113.66")})
	p.Learn("rebind.example.com", []netip.Addr{addr("10.9.9.9")})
	for _, tc := range []struct {
		dst   string
		port  uint16
		allow bool
	}{
		{"10.0.2.2", 8080, true},        // the host mapping, on its port
		{"10.0.2.2", 22, false},         // not another port
		{"1.1.1.1", 443, true},          // any address on 443
		{"169.254.169.254", 443, false}, // 0.0.0.0/0 does not open metadata
		{"127.0.0.1", 443, false},       // nor loopback
		{"10.0.2.2", 443, false},        // nor the host
		{"192.168.7.9", 22, true},       // a rule inside a private range opens it
		{"192.168.8.9", 22, false},      // only that part
		{"1.1.1.1", 80, false},          // default deny
		{"151.101.0.223", 80, true},     // learned name, any port
		{"151.101.0.224", 80, false},    // not learned
		{"203.0.113.9", 80, true},       // wildcard name
		{"203.0.113.9", 81, false},      // wrong port
		{"203.0.113.66", 80, false},     // deny by name wins
		{"198.51.100.1", 443, false},    // deny by CIDR wins over allow 0.0.0.0/0:443
		{"10.9.9.9", 80, false},         // a name never opens a built-in range (DNS rebinding)
		{"2001:db8::1", 53, true},       // v6 rule with port
		{"2001:db8::1", 54, false},
	} {
		d := p.Decide(addr(tc.dst), tc.port)
		if d.Allow != tc.allow {
			t.Errorf("Decide(%s:%d) = %+v, want allow=%v", tc.dst, tc.port, d, tc.allow)
		}
	}
}

func TestBadPolicy(t *testing.T) {
	for _, e := range []api.Egress{
		{Default: "maybe"},
		{Allow: []string{"10.0.0.0/33"}},
		{Deny: []string{"exa mple.com"}},
		{Allow: []string{"1.2.3.4:99999"}},
		{Allow: []string{"[::1"}},
		{Narrow: &api.Narrow{Default: "never"}},
		{Narrow: &api.Narrow{Deny: []string{"0.0.0.0/99"}}},
	} {
		if _, err := New(&e); err == nil {
			t.Errorf("New(%+v) accepted a bad policy", e)
		} else if !strings.Contains(err.Error(), "want") {
			t.Errorf("New(%+v): %v does not say what it wants", e, err)
		}
	}
}

// TestNarrow: a narrowing refuses more, in E2B's order (its allow rules
// win over its deny rules), and never admits what the policy refuses.
func TestNarrow(t *testing.T) {
	base := api.Egress{Allow: []string{"10.0.2.2:8080"}, Deny: []string{"198.51.100.0/24"}}
	for _, tc := range []struct {
		name   string
		narrow api.Narrow
		dst    string
		port   uint16
		allow  bool
		reason string
	}{
		{"none narrows nothing", api.Narrow{}, "1.1.1.1", 443, true, "default allow"},
		{"no internet", api.Narrow{Default: "deny"}, "1.1.1.1", 443, false, "narrowed: default deny"},
		{"no internet, the host's port", api.Narrow{Default: "deny"}, "10.0.2.2", 8080, false, "narrowed: default deny"},
		{"deny all but one", api.Narrow{Deny: []string{"0.0.0.0/0"}, Allow: []string{"1.1.1.1"}}, "1.1.1.1", 443, true, "default allow"},
		{"deny all but one: another", api.Narrow{Deny: []string{"0.0.0.0/0"}, Allow: []string{"1.1.1.1"}}, "8.8.8.8", 53, false, "narrowed: deny rule 0.0.0.0/0"},
		{"allow wins over deny", api.Narrow{Deny: []string{"8.8.0.0/16"}, Allow: []string{"8.8.8.8"}}, "8.8.8.8", 53, true, "default allow"},
		{"deny one", api.Narrow{Deny: []string{"8.8.0.0/16"}}, "8.8.4.4", 53, false, "narrowed: deny rule 8.8.0.0/16"},
		{"allow opens no built-in range", api.Narrow{Allow: []string{"169.254.169.254", "10.0.2.2"}}, "169.254.169.254", 80, false, "metadata"},
		{"allow opens no operator's deny", api.Narrow{Allow: []string{"198.51.100.7"}}, "198.51.100.7", 80, false, "deny rule 198.51.100.0/24"},
		{"allow by name", api.Narrow{Default: "deny", Allow: []string{"pypi.org"}}, "151.101.0.223", 443, true, "default allow"},
		{"the host's port kept", api.Narrow{Deny: []string{"1.0.0.0/8"}}, "10.0.2.2", 8080, true, "allow rule 10.0.2.2/32:8080"},
	} {
		e := base
		n := tc.narrow
		e.Narrow = &n
		p, err := New(&e)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		p.Learn("pypi.org", []netip.Addr{addr("151.101.0.223")})
		d := p.Decide(addr(tc.dst), tc.port)
		if d.Allow != tc.allow || !strings.Contains(d.Reason, tc.reason) {
			t.Errorf("%s: Decide(%s:%d) = %+v, want allow=%v reason ~ %q", tc.name, tc.dst, tc.port, d, tc.allow, tc.reason)
		}
	}
}

// TestSetNarrow: a narrowing set later decides the flows after it, and
// nil lifts it; a bad one is refused and the one before stays.
func TestSetNarrow(t *testing.T) {
	p, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	dst := addr("1.1.1.1")
	if !p.Decide(dst, 443).Allow {
		t.Fatal("refused before any narrowing")
	}
	if err := p.SetNarrow(&api.Narrow{Default: "deny"}); err != nil {
		t.Fatal(err)
	}
	if d := p.Decide(dst, 443); d.Allow || d.Reason != "narrowed: default deny" {
		t.Fatalf("after SetNarrow(deny): %+v", d)
	}
	if err := p.SetNarrow(&api.Narrow{Allow: []string{"bad rule!"}}); err == nil {
		t.Fatal("a bad narrowing was taken")
	}
	if p.Decide(dst, 443).Allow {
		t.Fatal("a refused narrowing replaced the one before")
	}
	if err := p.SetNarrow(nil); err != nil || !p.Decide(dst, 443).Allow {
		t.Fatalf("SetNarrow(nil): %v, %+v", err, p.Decide(dst, 443))
	}
}
