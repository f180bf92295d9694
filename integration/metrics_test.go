package integration

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestPoolPrometheus: a pool server with metrics.listen on a unix socket
// exports its boots, claims (adopted and empty), depth and target, and
// the scrape's counts match what the test did.
func TestPoolPrometheus(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	sock := filepath.Join(t.TempDir(), "metrics.sock")
	p := startPoolWith(t, 2, fmt.Sprintf("max_size = 2\nboot_concurrency = 2\n[metrics]\nlisten = %q\n", "unix://"+sock))
	scrape := func() string {
		t.Helper()
		return scrapeUnix(t, sock)
	}
	value := func(body, series string) float64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9.e+]+)$`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no series %s in the scrape:\n%s", series, body)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	poolSock := filepath.Join(filepath.Dir(p.Config), "pool.sock")
	body := scrape()
	if v := value(body, `gvx_operations_total{component="pool",op="boot",outcome="ok"}`); v < 2 {
		t.Errorf("boots ok: %v, want ≥ 2", v)
	}
	if v := value(body, fmt.Sprintf(`gvx_pool_ready{pool=%q}`, poolSock)); v != 2 {
		t.Errorf("ready: %v, want 2", v)
	}
	if v := value(body, fmt.Sprintf(`gvx_pool_target{pool=%q}`, poolSock)); v != 2 {
		t.Errorf("target: %v, want 2", v)
	}
	// Three creates at once on a pool of two: two adopt, one finds it
	// empty (refills wait 250 ms after a claim while half is ready, and a
	// boot takes longer than the three claims).
	nAdopted := 0
	for i := range 3 {
		id := fmt.Sprintf("pm%d", i)
		cleanupTask(t, id)
		mustCtr(t, "run", "-d", "--runtime", runtime, "--runtime-config-path", p.Config, busybox, id, "sleep", "600")
		if adopted(id) != "" {
			nAdopted++
		}
	}
	body = scrape()
	a := value(body, fmt.Sprintf(`gvx_pool_claims_total{component="pool",pool=%q,result="adopted"}`, poolSock))
	if int(a) != nAdopted || nAdopted < 2 {
		t.Errorf("adopted claims: metric %v, tasks that adopted %d", a, nAdopted)
	}
	if nAdopted == 2 {
		if v := value(body, fmt.Sprintf(`gvx_pool_claims_total{component="pool",pool=%q,result="empty"}`, poolSock)); v != 1 {
			t.Errorf("empty claims: %v, want 1", v)
		}
	}
	if v := value(body, `gvx_operation_seconds_count{component="pool",op="boot"}`); v < 2 {
		t.Errorf("boot latencies observed: %v", v)
	}
	t.Logf("pool metrics after 3 creates: %d adopted", nAdopted)
}
