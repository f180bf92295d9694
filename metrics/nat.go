package metrics

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gvxrun/gvx/api"
)

// natFile is the name pattern of a NAT's counters in a sentry root
// (api.SentryRoot.NATStats).
const natFile = "gvx-nat-*.json"

var natLabels = []string{"namespace", "sandbox"}

var (
	natFlows = prometheus.NewDesc("gvx_nat_flows_total",
		"Flows a sandbox's NAT let out (the egress policy allowed them and a host socket was opened).", natLabels, nil)
	natRefused = prometheus.NewDesc("gvx_nat_refused_total",
		"Flows a sandbox's NAT refused with an RST or ICMP unreachable, by reason: policy (the egress policy) or limit (max_connections).",
		append(natLabels, "reason"), nil)
	natBytes = prometheus.NewDesc("gvx_nat_bytes_total",
		"Bytes a sandbox's NAT relayed, by direction: out (guest → host) or in (host → guest).", append(natLabels, "direction"), nil)
	natOpen = prometheus.NewDesc("gvx_nat_open_flows",
		"Flows a sandbox's NAT has open now (what max_connections caps).", natLabels, nil)
	natDNS = prometheus.NewDesc("gvx_nat_dns_queries_total",
		"DNS queries a sandbox's NAT answered on 10.0.2.3.", natLabels, nil)
	natPublished = prometheus.NewDesc("gvx_nat_published_connections_total",
		"Connections accepted on a sandbox's published ports.", natLabels, nil)
)

// natCollector reads the counters of every NAT sandbox under a state
// directory at each scrape: the NAT processes write them to their sentry
// roots (sentry/nat's Stats), whoever started the sandbox.
type natCollector struct{ layout api.Layout }

// NAT exports the NAT counters (gvx_nat_*) of every NAT sandbox whose
// sentry root is under l's state directory, read at each scrape.
func (m *Set) NAT(l api.Layout) {
	if m != nil {
		m.Registry.MustRegister(natCollector{l})
	}
}

// Describe implements prometheus.Collector.
func (natCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{natFlows, natRefused, natBytes, natOpen, natDNS, natPublished} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A file that does not parse
// (being rewritten, or removed at teardown) is skipped for this scrape.
func (c natCollector) Collect(ch chan<- prometheus.Metric) {
	// <state>/sentry/<sandbox>/<namespace>/gvx-nat-<id>.json
	files, _ := filepath.Glob(filepath.Join(c.layout.SentryRoots(), "*", "*", natFile))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var s api.NATStats
		if json.Unmarshal(data, &s) != nil {
			continue
		}
		id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "gvx-nat-"), ".json")
		ns := filepath.Base(filepath.Dir(f))
		counter := func(d *prometheus.Desc, v int64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{ns, id}, extra...)...)
		}
		counter(natFlows, s.Allowed)
		counter(natRefused, s.Refused-s.RefusedLimit, "policy")
		counter(natRefused, s.RefusedLimit, "limit")
		counter(natBytes, s.BytesOut, "out")
		counter(natBytes, s.BytesIn, "in")
		counter(natDNS, s.DNSQueries)
		counter(natPublished, s.Published)
		ch <- prometheus.MustNewConstMetric(natOpen, prometheus.GaugeValue, float64(s.Open), ns, id)
	}
}
