package api_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
)

func TestParsePort(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	for _, tc := range []struct {
		in   string
		want api.Port
	}{
		{"8080:80", api.Port{Proto: "tcp", Host: lo, HostPort: 8080, GuestPort: 80}},
		{"5353:53/udp", api.Port{Proto: "udp", Host: lo, HostPort: 5353, GuestPort: 53}},
		{"0.0.0.0:8080:80/tcp", api.Port{Proto: "tcp", Host: netip.MustParseAddr("0.0.0.0"), HostPort: 8080, GuestPort: 80}},
		{"[::1]:8080:80", api.Port{Proto: "tcp", Host: netip.MustParseAddr("::1"), HostPort: 8080, GuestPort: 80}},
		{"unix:/srv/ep-42.sock:2375", api.Port{Proto: "tcp", Unix: "/srv/ep-42.sock", GuestPort: 2375}},
	} {
		got, err := api.ParsePort(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParsePort(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for in, why := range map[string]string{
		"80":                   "no guest port",
		"8080:0":               "not a port number",
		"8080:70000":           "not a port number",
		"x:80":                 "not a port number",
		"8080:80/sctp":         "neither tcp nor udp",
		"300.1.1.1:8080:80":    "host address",
		"unix:rel.sock:80":     "absolute",
		"unix:/a/../b.sock:80": "clean",
		"unix:/srv/x.sock":     "no guest port",
		"unix:/" + strings.Repeat("a", 120) + ":80": "longer",
	} {
		_, err := api.ParsePort(in)
		if err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "want HOSTPORT:GUESTPORT") {
			t.Errorf("ParsePort(%q) = %v, want an error saying %q and the syntax", in, err, why)
		}
	}
}

func TestParseRule(t *testing.T) {
	for in, want := range map[string]api.Rule{
		"10.0.0.0/8":       {Prefix: netip.MustParsePrefix("10.0.0.0/8")},
		"10.1.2.3/8":       {Prefix: netip.MustParsePrefix("10.0.0.0/8")},
		"10.0.2.2:8080":    {Prefix: netip.MustParsePrefix("10.0.2.2/32"), Port: 8080},
		"0.0.0.0/0:443":    {Prefix: netip.MustParsePrefix("0.0.0.0/0"), Port: 443},
		"2001:db8::/32":    {Prefix: netip.MustParsePrefix("2001:db8::/32")},
		"[2001:db8::1]:53": {Prefix: netip.MustParsePrefix("2001:db8::1/128"), Port: 53},
		"PyPI.org.":        {Name: "pypi.org"},
		"*.github.com:443": {Name: "*.github.com", Port: 443},
	} {
		got, err := api.ParseRule(in)
		if err != nil || got != want {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "10.0.0.0/33", "exa mple.com", "a..b", "-a.com", "1.2.3.4:0", "[::1", "[::1]x", "host:port"} {
		if _, err := api.ParseRule(in); err == nil || !strings.Contains(err.Error(), "want CIDR") {
			t.Errorf("ParseRule(%q) = %v, want an error with the syntax", in, err)
		}
	}
}

func TestDecodeNAT(t *testing.T) {
	n, err := api.DecodeNAT(`{"ports":["8080:80"],"egress":{"default":"deny","allow":["pypi.org:443"]},"dns":["127.0.0.1:53"]}`)
	if err != nil || len(n.Ports) != 1 || n.Egress.Default != "deny" || n.DNS[0] != "127.0.0.1:53" {
		t.Fatalf("DecodeNAT = %+v, %v", n, err)
	}
	enc, err := api.EncodeNAT(n)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := api.DecodeNAT(enc); err != nil || back.Egress.Allow[0] != "pypi.org:443" {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	for in, why := range map[string]string{
		`{"egres":{}}`:                        `unknown field "egres"`,
		`{"egress":{"defualt":"deny"}}`:       `unknown field "defualt"`,
		`{"egress":{"default":"maybe"}}`:      "want allow or deny",
		`{"ports":["8080:80","8080:81"]}`:     "published twice",
		`{"dns":["localhost"]}`:               "want ADDR:PORT",
		`{"egress":{"deny":["10.0.0.0/40"]}}`: "egress rule",
		`not json`:                            "dev.gvx.nat",
	} {
		if _, err := api.DecodeNAT(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("DecodeNAT(%s) = %v, want an error saying %q", in, err, why)
		}
	}
}
