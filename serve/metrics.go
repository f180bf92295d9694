package serve

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// metrics are the service's Prometheus metrics (text exposition format).
type metrics struct {
	mu       sync.Mutex
	requests map[string]int64   // route and code → count
	seconds  map[string]float64 // route → total seconds
	creates  int64
	createS  float64
	expired  atomic.Int64
}

func newMetrics() *metrics {
	return &metrics{requests: map[string]int64{}, seconds: map[string]float64{}}
}

func (m *metrics) request(route string, code int, d time.Duration) {
	m.mu.Lock()
	m.requests[fmt.Sprintf(`route=%q,code="%d"`, route, code)]++
	m.seconds[fmt.Sprintf(`route=%q`, route)] += d.Seconds()
	m.mu.Unlock()
}

func (m *metrics) created(d time.Duration) {
	m.mu.Lock()
	m.creates++
	m.createS += d.Seconds()
	m.mu.Unlock()
}

// promHandler is GET /metrics.
func (s *Service) promHandler(w http.ResponseWriter, _ *http.Request) {
	var b strings.Builder
	states := map[State]int{Running: 0, Paused: 0}
	commands := 0
	s.mu.Lock()
	for _, e := range s.boxes {
		if !e.gone {
			states[e.rec.State]++
			commands += e.envd.Running()
		}
	}
	s.mu.Unlock()
	fmt.Fprintln(&b, "# HELP gvx_serve_sandboxes Sandboxes the service holds, by state.")
	fmt.Fprintln(&b, "# TYPE gvx_serve_sandboxes gauge")
	for _, st := range []State{Running, Paused} {
		fmt.Fprintf(&b, "gvx_serve_sandboxes{state=%q} %d\n", st, states[st])
	}
	fmt.Fprintln(&b, "# HELP gvx_serve_commands_running Commands running through envd.")
	fmt.Fprintln(&b, "# TYPE gvx_serve_commands_running gauge")
	fmt.Fprintf(&b, "gvx_serve_commands_running %d\n", commands)
	m := s.metrics
	m.mu.Lock()
	fmt.Fprintln(&b, "# HELP gvx_serve_sandbox_create_seconds Time to create a sandbox (backend create until it runs commands).")
	fmt.Fprintln(&b, "# TYPE gvx_serve_sandbox_create_seconds summary")
	fmt.Fprintf(&b, "gvx_serve_sandbox_create_seconds_sum %g\ngvx_serve_sandbox_create_seconds_count %d\n", m.createS, m.creates)
	fmt.Fprintln(&b, "# HELP gvx_serve_requests_total HTTP requests, by route (api or envd) and status code.")
	fmt.Fprintln(&b, "# TYPE gvx_serve_requests_total counter")
	keys := make([]string, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "gvx_serve_requests_total{%s} %d\n", k, m.requests[k])
	}
	fmt.Fprintln(&b, "# HELP gvx_serve_request_seconds_total Time spent answering requests, by route.")
	fmt.Fprintln(&b, "# TYPE gvx_serve_request_seconds_total counter")
	keys = keys[:0]
	for k := range m.seconds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "gvx_serve_request_seconds_total{%s} %g\n", k, m.seconds[k])
	}
	m.mu.Unlock()
	fmt.Fprintln(&b, "# HELP gvx_serve_sandboxes_expired_total Sandboxes removed at their end time.")
	fmt.Fprintln(&b, "# TYPE gvx_serve_sandboxes_expired_total counter")
	fmt.Fprintf(&b, "gvx_serve_sandboxes_expired_total %d\n", m.expired.Load())
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write([]byte(b.String()))
}
