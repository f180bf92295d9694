package serve

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gvxrun/gvx/metrics"
	"github.com/gvxrun/gvx/serve/backend"
)

// serviceMetrics are the service's Prometheus metrics: gvx's operation
// families (package metrics) and the service's own.
type serviceMetrics struct {
	*metrics.Set
	requests *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
	expired  prometheus.Counter
}

func newMetrics(s *Service) *serviceMetrics {
	m := &serviceMetrics{
		Set: metrics.New("serve"),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gvx_serve_requests_total", Help: "HTTP requests, by route (api or envd) and status code.",
		}, []string{"route", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gvx_serve_request_seconds", Help: "Time to answer requests, by route.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 30},
		}, []string{"route"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gvx_serve_sandboxes_expired_total", Help: "Sandboxes removed at their end time.",
		}),
	}
	m.Registry.MustRegister(m.requests, m.seconds, m.expired)
	for _, st := range []State{Running, Paused} {
		m.Gauge("gvx_serve_sandboxes", "Sandboxes the service holds, by state.", prometheus.Labels{"state": string(st)}, func() float64 {
			return float64(s.count(func(e *entry) bool { return e.rec.State == st }))
		})
	}
	m.Gauge("gvx_serve_commands_running", "Commands running through envd.", nil, func() float64 {
		n := 0
		s.count(func(e *entry) bool { n += e.envd.Running(); return false })
		return float64(n)
	})
	return m
}

func (m *serviceMetrics) request(route string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.seconds.WithLabelValues(route).Observe(d.Seconds())
}

// count counts the live sandboxes f says yes to.
func (s *Service) count(f func(*entry) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.boxes {
		if !e.gone && f(e) {
			n++
		}
	}
	return n
}

// Metrics are the service's metrics (the caller adds the janitor's).
func (s *Service) Metrics() *metrics.Set { return s.metrics.Set }

// measured is a sandbox whose execs are timed: what envd runs commands
// on (the entry keeps the backend's own, with its optional interfaces).
type measured struct {
	backend.Sandbox
	m *metrics.Set
}

func (s *Service) measure(sb backend.Sandbox) backend.Sandbox {
	return measured{sb, s.metrics.Set}
}

// Exec times the exec's start. Its outcome is counted when it could not
// start, or once it ends: ok, or the class of what ended it (an OOM kill
// of the sandbox, a timeout), which the backend's process reports.
func (x measured) Exec(ctx context.Context, c backend.Cmd) (backend.Process, error) {
	t0 := time.Now()
	p, err := x.Sandbox.Exec(ctx, c)
	if err != nil {
		x.m.Observe(metrics.OpExec, t0, err)
		return p, err
	}
	x.m.Time(metrics.OpExec, t0)
	return &measuredProcess{Process: p, m: x.m}, nil
}

// measuredProcess counts its exec's outcome when Wait first returns.
type measuredProcess struct {
	backend.Process
	m    *metrics.Set
	once sync.Once
}

func (p *measuredProcess) Wait(ctx context.Context) (int, error) {
	code, err := p.Process.Wait(ctx)
	if ctx.Err() != nil && err != nil {
		return code, err // the caller stopped waiting; the process runs on
	}
	p.once.Do(func() {
		failure := err
		if f, ok := p.Process.(interface{ Failure() error }); ok && failure == nil {
			failure = f.Failure()
		}
		p.m.Fail(metrics.OpExec, failure)
	})
	return code, err
}
