// Package metrics is gvx's Prometheus metrics and their endpoint.
//
// A Set holds the families the long-running gvx processes (`gvx pool
// serve`, `gvx serve`) export: latency histograms and outcomes by failure
// class of each sandbox operation (create, exec, reset, destroy, a pool's
// boot), sandbox lifetimes, pool depth and claims (the adopt ratio), and
// what the janitor reclaimed. Listen and Serve put it on a loopback TCP
// address or a unix socket. The families and their meaning are listed in
// docs/operations.md; deploy/grafana/gvx.json is a dashboard over them.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Operations observed.
const (
	OpCreate  = "create"
	OpExec    = "exec"
	OpReset   = "reset"
	OpDestroy = "destroy"
	OpBoot    = "boot" // a pool server booting a sandbox ahead of demand
)

// Set is one process's metrics.
type Set struct {
	// Registry holds the families (and Go's and the process's own).
	Registry *prometheus.Registry

	seconds   *prometheus.HistogramVec
	outcomes  *prometheus.CounterVec
	lifetime  prometheus.Histogram
	claims    *prometheus.CounterVec
	reclaimed *prometheus.CounterVec
	sweeps    *prometheus.CounterVec
	resets    *prometheus.CounterVec
}

// Results of a pool sandbox's reset (Reset), besides a failed
// verification's reason.
const (
	ResetOK      = "reset"   // verified and back in the pool
	ResetRefused = "refused" // verified, but the pool did not take it back
	ResetMaxUses = "max_uses"
)

// latencyBuckets span a warm adopt (≈ 10 ms) to a cold image pull.
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// New makes a Set; component ("pool", "serve") labels every family.
func New(component string) *Set {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	c := prometheus.Labels{"component": component}
	m := &Set{
		Registry: reg,
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gvx_operation_seconds", Help: "Latency of sandbox operations (create, exec, reset, destroy, boot), successful or not.",
			ConstLabels: c, Buckets: latencyBuckets,
		}, []string{"op"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gvx_operations_total", Help: "Sandbox operations by outcome: ok, or the failure class (image, volume, sandbox_start, adopt, timeout, oom, quota, admission, other).",
			ConstLabels: c,
		}, []string{"op", "outcome"}),
		lifetime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gvx_sandbox_lifetime_seconds", Help: "How long sandboxes lived, from running to destroyed.",
			ConstLabels: c, Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600},
		}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gvx_pool_claims_total", Help: "Claims on a pool: adopted (a ready sandbox was handed out) or empty (none ready, the task boots its own).",
			ConstLabels: c,
		}, []string{"pool", "result"}),
		reclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gvx_janitor_reclaimed_total", Help: "Leftovers the janitor reclaimed, by kind.",
			ConstLabels: c,
		}, []string{"kind"}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gvx_janitor_sweeps_total", Help: "Janitor sweeps, by result (clean: every leftover reclaimed; failed: some could not be).",
			ConstLabels: c,
		}, []string{"result"}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gvx_pool_resets_total", Help: "Pool sandboxes released by their task, by result: reset (back in the pool), max_uses (destroyed after pool.max_uses tasks), refused, or the reason its verification failed (destroyed).",
			ConstLabels: c,
		}, []string{"result"}),
	}
	reg.MustRegister(m.seconds, m.outcomes, m.lifetime, m.claims, m.reclaimed, m.sweeps, m.resets)
	return m
}

// Observe records an operation that started at t0 and ended with err.
func (m *Set) Observe(op string, t0 time.Time, err error) {
	if m == nil {
		return
	}
	m.seconds.WithLabelValues(op).Observe(time.Since(t0).Seconds())
	m.outcomes.WithLabelValues(op, Classify(err)).Inc()
}

// Time records the latency of an operation that started at t0, whose
// outcome Fail counts later.
func (m *Set) Time(op string, t0 time.Time) {
	if m != nil {
		m.seconds.WithLabelValues(op).Observe(time.Since(t0).Seconds())
	}
}

// Fail counts an operation's outcome without a latency: one refused
// before it started (admission, quota), or one Time timed (nil: ok).
func (m *Set) Fail(op string, err error) {
	if m == nil {
		return
	}
	m.outcomes.WithLabelValues(op, Classify(err)).Inc()
}

// Reset counts a released pool sandbox's reset by result (ResetOK,
// ResetMaxUses, ResetRefused, or a failed verification's reason).
func (m *Set) Reset(result string) {
	if m != nil {
		m.resets.WithLabelValues(result).Inc()
	}
}

// Lifetime records a sandbox that lived d.
func (m *Set) Lifetime(d time.Duration) {
	if m != nil {
		m.lifetime.Observe(d.Seconds())
	}
}

// Claim counts a claim on pool: adopted, or refused for want of a ready
// sandbox.
func (m *Set) Claim(pool string, adopted bool) {
	if m == nil {
		return
	}
	r := "empty"
	if adopted {
		r = "adopted"
	}
	m.claims.WithLabelValues(pool, r).Inc()
}

// Pool exports a pool's depth: ready and target report its ready
// sandboxes and the depth it aims at, read at each scrape.
func (m *Set) Pool(pool string, ready, target func() float64) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"pool": pool}
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gvx_pool_ready", Help: "Sandboxes booted and waiting to be claimed.", ConstLabels: l}, ready),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gvx_pool_target", Help: "Ready sandboxes the pool aims to keep (its depth, following demand).", ConstLabels: l}, target),
	)
}

// Gauge exports a value read at each scrape.
func (m *Set) Gauge(name, help string, labels prometheus.Labels, f func() float64) {
	if m != nil {
		m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f))
	}
}

// Swept records a janitor sweep: what it reclaimed, by kind, and how
// many leftovers it failed to reclaim.
func (m *Set) Swept(reclaimed map[string]int, failed int) {
	if m == nil {
		return
	}
	for k, n := range reclaimed {
		m.reclaimed.WithLabelValues(k).Add(float64(n))
	}
	r := "clean"
	if failed > 0 {
		r = "failed"
	}
	m.sweeps.WithLabelValues(r).Inc()
}

// Handler serves the Set in Prometheus's exposition formats.
func (m *Set) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
