package serve

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/serve/backend"
)

// networkJSON is E2B's network object of a create (NewSandbox) and of a
// SandboxDetail. gvx serve honours allowOut, denyOut and
// allowPublicTraffic (servePort); it refuses an egress proxy (it has
// none, and traffic meant to be audited there must not leave another
// way) and ignores maskRequestHost, httpsPorts and request rewriting
// (rules).
type networkJSON struct {
	AllowOut    []string        `json:"allowOut,omitempty"`
	DenyOut     []string        `json:"denyOut,omitempty"`
	EgressProxy json.RawMessage `json:"egressProxy,omitempty"`
	// AllowPublicTraffic false makes the sandbox's ports (not envd's)
	// answer only requests with its trafficAccessToken in the
	// e2b-traffic-access-token header.
	AllowPublicTraffic *bool `json:"allowPublicTraffic,omitempty"`
}

// networkRequest is what a create asked of the sandbox's network, kept in
// its record: E2B's allow_internet_access: false, and network.allowOut /
// denyOut. On a template of network "nat" it narrows the template's
// egress policy (an allowOut rule wins over a denyOut one, as in E2B);
// it opens nothing the template's policy refuses. A template without a
// network has none to narrow.
type networkRequest struct {
	NoInternet bool     `json:"noInternet,omitempty"`
	AllowOut   []string `json:"allowOut,omitempty"`
	DenyOut    []string `json:"denyOut,omitempty"`
}

// parseNetwork checks a create's allow_internet_access and network: nil
// when they narrow nothing.
func parseNetwork(allowInternet *bool, n *networkJSON) (*networkRequest, error) {
	r := &networkRequest{NoInternet: allowInternet != nil && !*allowInternet}
	if n != nil {
		if len(n.EgressProxy) > 0 && string(n.EgressProxy) != "null" {
			return nil, httpErrorf(http.StatusBadRequest, "network.egressProxy: gvx serve has no egress proxy; the template's NAT policy with network.allowOut and network.denyOut decides what leaves the sandbox")
		}
		for _, l := range []struct {
			name  string
			rules []string
		}{{"allowOut", n.AllowOut}, {"denyOut", n.DenyOut}} {
			for i, rule := range l.rules {
				if _, err := api.ParseRule(rule); err != nil {
					return nil, httpErrorf(http.StatusBadRequest, "network.%s[%d]: %v", l.name, i, err)
				}
			}
		}
		r.AllowOut, r.DenyOut = n.AllowOut, n.DenyOut
	}
	if !r.NoInternet && len(r.AllowOut) == 0 && len(r.DenyOut) == 0 {
		return nil, nil
	}
	return r, nil
}

// narrow is r as a narrowing of template t's egress policy: nil when t
// has no NAT or r narrows nothing.
func (r *networkRequest) narrow(t backend.Template) *api.Narrow {
	if r == nil || t.Network != backend.NetworkNAT {
		return nil
	}
	n := &api.Narrow{Allow: r.AllowOut, Deny: r.DenyOut}
	if r.NoInternet {
		n.Default = "deny"
	}
	return n
}

// internet is SandboxDetail's allowInternetAccess of a sandbox of t that
// r was asked of: whether its flows may leave at all.
func (r *networkRequest) internet(t backend.Template) bool {
	return t.Network == backend.NetworkNAT && (r == nil || !r.NoInternet)
}

// json is r as SandboxDetail's network (nil: nothing asked).
func (r *networkRequest) json() *networkJSON {
	if r == nil || len(r.AllowOut)+len(r.DenyOut) == 0 {
		return nil
	}
	return &networkJSON{AllowOut: r.AllowOut, DenyOut: r.DenyOut}
}

// checkNetwork checks template t's network settings.
func checkNetwork(t backend.Template) error {
	switch t.Network {
	case "", backend.NetworkNone:
		if t.NAT != nil {
			return fmt.Errorf("template %s: nat settings need network = %q", t.Name, backend.NetworkNAT)
		}
		return nil
	case backend.NetworkNAT:
	default:
		return fmt.Errorf("template %s: network %q: want %q (loopback only, the default) or %q (eth0 behind the sandbox's own NAT)", t.Name, t.Network, backend.NetworkNone, backend.NetworkNAT)
	}
	if t.NAT == nil {
		return nil
	}
	n := api.NAT{DNS: t.NAT.DNS, MaxConnections: t.NAT.MaxConnections}
	if e := t.NAT.Egress; e != nil {
		n.Egress = &api.Egress{Default: e.Default, Allow: e.Allow, Deny: e.Deny}
	}
	if err := n.Check(); err != nil {
		return fmt.Errorf("template %s: nat: %w", t.Name, err)
	}
	if _, err := t.NAT.BandwidthBytes(); err != nil {
		return fmt.Errorf("template %s: %w", t.Name, err)
	}
	return nil
}

// updateNetworkHandler is E2B's PUT /sandboxes/{id}/network
// (updateNetwork): the body's allow_internet_access, allowOut and denyOut
// replace what the create asked (all absent: no narrowing), and a NAT
// template's sandbox's NAT decides its next flows by them → 204.
func (s *Service) updateNetworkHandler(w http.ResponseWriter, r *http.Request, key string) {
	var req struct {
		networkJSON
		AllowInternetAccess *bool `json:"allow_internet_access"`
	}
	e := s.entryAndBody(w, r, key, &req)
	if e == nil {
		return
	}
	nw, err := parseNetwork(req.AllowInternetAccess, &req.networkJSON)
	if err != nil {
		writeError(w, err)
		return
	}
	e.op.Lock()
	defer e.op.Unlock()
	s.mu.Lock()
	isGone := e.gone
	s.mu.Unlock()
	if isGone {
		writeError(w, gone(errGone, e))
		return
	}
	if err := s.narrow(r.Context(), e.tmpl, e.sb, nw); err != nil {
		writeError(w, httpErrorf(http.StatusInternalServerError, "update the network of sandbox %s: %v (its policy is as before)", e.rec.ID, err))
		return
	}
	s.mu.Lock()
	e.rec.Network = nw
	s.mu.Unlock()
	s.save()
	w.WriteHeader(http.StatusNoContent)
}

// narrow gives sandbox sb of template t the narrowing nw asks (a
// template without a NAT has nothing to narrow).
func (s *Service) narrow(ctx context.Context, t backend.Template, sb backend.Sandbox, nw *networkRequest) error {
	if t.Network != backend.NetworkNAT {
		return nil
	}
	n, ok := sb.(backend.Narrower)
	if !ok {
		return fmt.Errorf("this service's backend cannot change a running sandbox's network")
	}
	return n.NarrowEgress(ctx, nw.narrow(t))
}

// servePort proxies an HTTP request (WebSocket upgrades included) to TCP
// port of sandbox sb's guest (of template t): E2B's sandbox URLs, <port>-<id>.<domain> or
// the E2b-Sandbox-Id and E2b-Sandbox-Port headers. Each request is one
// connection through the sandbox's NAT (the guest sees it come from
// 10.0.2.2). A sandbox created with allowPublicTraffic: false answers
// only requests carrying its trafficAccessToken in the
// e2b-traffic-access-token header.
func (s *Service) servePort(w http.ResponseWriter, r *http.Request, sb backend.Sandbox, t backend.Template, rec record, port string) {
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		notFound(w, rec.ID, fmt.Sprintf("port %q of sandbox %s: want 1 to 65535", port, rec.ID))
		return
	}
	d, ok := sb.(backend.PortDialer)
	if !ok || t.Network != backend.NetworkNAT {
		notFound(w, rec.ID, fmt.Sprintf("port %s of sandbox %s: its template has no network; a template of network \"nat\" serves its sandboxes' ports (docs/serve.md#network)", port, rec.ID))
		return
	}
	if rec.TrafficToken != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("E2b-Traffic-Access-Token")), []byte(rec.TrafficToken)) != 1 {
		writeJSON(w, http.StatusForbidden, map[string]any{"code": http.StatusForbidden, "sandboxId": rec.ID,
			"message": "the sandbox's ports are private (allowPublicTraffic: false): send its trafficAccessToken in the e2b-traffic-access-token header"})
		return
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", net.JoinHostPort("10.0.2.15", port)
			pr.Out.Host = r.Host
			for _, h := range []string{"E2b-Sandbox-Id", "E2b-Sandbox-Port", "E2b-Traffic-Access-Token", "X-Api-Key"} {
				pr.Out.Header.Del(h)
			}
		},
		Transport: &http.Transport{
			DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialPort(ctx, p) },
			DisableKeepAlives: true,
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			notFound(w, rec.ID, fmt.Sprintf("port %s of sandbox %s: %v", port, rec.ID, err))
		},
	}
	proxy.ServeHTTP(w, r)
}
