package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

func TestClassify(t *testing.T) {
	for err, want := range map[error]string{
		nil:                                    OK,
		WithClass(ClassQuota, errors.New("x")): ClassQuota,
		fmt.Errorf("create: %w", context.DeadlineExceeded):                      ClassTimeout,
		fmt.Errorf("admit: %w", errdefs.ErrResourceExhausted):                   ClassAdmission,
		errors.New("gvx: new x: clone volume /v.ext4: no space"):                ClassVolume,
		errors.New("gvx: new x: pull docker.io/library/busybox: not found"):     ClassImage,
		errors.New("gvx: new x: create the sandbox: gvx-sentry create: exit 1"): ClassSandboxStart,
		errors.New("task x: OOM killed"):                                        ClassOOM,
		errors.New("something else"):                                            ClassOther,
	} {
		if got := Classify(err); got != want {
			t.Errorf("Classify(%v) = %s, want %s", err, got, want)
		}
	}
}

// TestEndpoint scrapes a Set over a unix socket after observing each kind
// of event, and checks the families and their values.
func TestEndpoint(t *testing.T) {
	m := New("test")
	m.Observe(OpCreate, time.Now().Add(-30*time.Millisecond), nil)
	m.Observe(OpCreate, time.Now(), errors.New("clone volume /v.ext4: no space"))
	m.Observe(OpExec, time.Now(), nil)
	m.Lifetime(90 * time.Second)
	m.Claim("/run/gvx/pool.sock", true)
	m.Claim("/run/gvx/pool.sock", true)
	m.Claim("/run/gvx/pool.sock", false)
	m.Pool("/run/gvx/pool.sock", func() float64 { return 3 }, func() float64 { return 8 })
	m.Swept(map[string]int{"mount": 2}, 1)

	sock := filepath.Join(t.TempDir(), "m.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := Endpoint(ctx, "unix://"+sock, false, m); err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://gvx/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`gvx_operations_total{component="test",op="create",outcome="ok"} 1`,
		`gvx_operations_total{component="test",op="create",outcome="volume"} 1`,
		`gvx_operation_seconds_bucket{component="test",op="create",le="0.05"} 2`,
		`gvx_operation_seconds_count{component="test",op="exec"} 1`,
		`gvx_sandbox_lifetime_seconds_bucket{component="test",le="60"} 0`,
		`gvx_sandbox_lifetime_seconds_bucket{component="test",le="120"} 1`,
		`gvx_pool_claims_total{component="test",pool="/run/gvx/pool.sock",result="adopted"} 2`,
		`gvx_pool_claims_total{component="test",pool="/run/gvx/pool.sock",result="empty"} 1`,
		`gvx_pool_ready{pool="/run/gvx/pool.sock"} 3`,
		`gvx_pool_target{pool="/run/gvx/pool.sock"} 8`,
		`gvx_janitor_reclaimed_total{component="test",kind="mount"} 2`,
		`gvx_janitor_sweeps_total{component="test",result="failed"} 1`,
		`go_goroutines `, `process_open_fds `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", body)
	}
	if err := Endpoint(ctx, "10.1.2.3:9464", false, m); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("a non-loopback address: %v", err)
	}
}

// TestDashboard: every gvx family the Grafana dashboard queries exists.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile("../deploy/grafana/gvx.json")
	if err != nil {
		t.Fatal(err)
	}
	m := New("test")
	m.Observe(OpCreate, time.Now(), nil)
	m.Lifetime(time.Second)
	m.Claim("p", true)
	m.Pool("p", func() float64 { return 0 }, func() float64 { return 0 })
	m.Swept(map[string]int{"mount": 1}, 0)
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range fams {
		have[f.GetName()] = true
	}
	used := regexp.MustCompile(`\b(gvx|process)_[a-z_]+`).FindAllString(string(data), -1)
	if len(used) < 10 {
		t.Fatalf("the dashboard queries only %v", used)
	}
	for _, n := range used {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count"), "_sum")
		if !have[base] {
			t.Errorf("the dashboard queries %s, which no Set exports", n)
		}
	}
}
