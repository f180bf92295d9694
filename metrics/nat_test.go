package metrics

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
)

// TestNATCollector: the NAT counters a NAT process wrote in its sentry
// root (padded JSON, as sentry/nat writes it) are scraped per sandbox,
// refusals split by reason; a torn file is skipped.
func TestNATCollector(t *testing.T) {
	l := api.Layout{Dir: t.TempDir()}
	root := api.SentryRoot(filepath.Join(l.SentryRoot("sb1"), "ns1"))
	if err := os.MkdirAll(string(root), 0o755); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(api.NATStats{Allowed: 5, Refused: 4, RefusedLimit: 1, BytesOut: 100, BytesIn: 200, Open: 2, DNSQueries: 3, Published: 7})
	data = append(data, strings.Repeat(" ", 100)...)
	if err := os.WriteFile(root.NATStats("sb1"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	torn := api.SentryRoot(filepath.Join(l.SentryRoot("sb2"), "ns1"))
	os.MkdirAll(string(torn), 0o755)
	os.WriteFile(torn.NATStats("sb2"), []byte(`{"allowed":`), 0o600)

	m := New("test")
	m.NAT(l)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`gvx_nat_flows_total{namespace="ns1",sandbox="sb1"} 5`,
		`gvx_nat_refused_total{namespace="ns1",reason="policy",sandbox="sb1"} 3`,
		`gvx_nat_refused_total{namespace="ns1",reason="limit",sandbox="sb1"} 1`,
		`gvx_nat_bytes_total{direction="out",namespace="ns1",sandbox="sb1"} 100`,
		`gvx_nat_bytes_total{direction="in",namespace="ns1",sandbox="sb1"} 200`,
		`gvx_nat_open_flows{namespace="ns1",sandbox="sb1"} 2`,
		`gvx_nat_dns_queries_total{namespace="ns1",sandbox="sb1"} 3`,
		`gvx_nat_published_connections_total{namespace="ns1",sandbox="sb1"} 7`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if strings.Contains(string(body), `sandbox="sb2"`) {
		t.Error("a torn stats file was exported")
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", body)
	}
}
