package integration

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// execLatency is the median of n execs of true in sandbox id.
func execLatency(t *testing.T, id string, n int) time.Duration {
	t.Helper()
	var ds []time.Duration
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, _, err := e.ctr(context.Background(), "task", "exec", "--exec-id", "lat"+token(t)[:6], id, "true"); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[n/2]
}

// latencySamples runs execs of true in sandbox id one after another until
// done is closed (and at least 5 ran: an abuser its limits stop at once
// is measured in its aftermath) and returns their latencies, sorted.
func latencySamples(t *testing.T, id string, done <-chan struct{}) []time.Duration {
	var ds []time.Duration
	for {
		select {
		case <-done:
			if len(ds) >= 5 {
				sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
				return ds
			}
		default:
		}
		t0 := time.Now()
		if _, _, err := e.ctr(context.Background(), "task", "exec", "--exec-id", "lat"+token(t)[:6], id, "true"); err != nil {
			t.Error(err)
		}
		ds = append(ds, time.Since(t0))
	}
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, len(ds)*p/100)]
}

// TestSecurityResourceAbuse: a fork bomb, a memory bomb, fd exhaustion,
// a CPU spin on every core and disk and inode fill of a volume, each in a
// sandbox limited to 256 MiB and one CPU: the abuse runs (its output says
// how far it got), the abuser is stopped by its own limits, and a canary
// sandbox answers: the median of its exec latencies, sampled back to back
// from 1 s into the abuse until it ends, stays within 3× its idle value
// (the larger of before the abuse and after it is killed).
func TestSecurityResourceAbuse(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	c := startCanary(t, "sec-res-canary")
	idle := execLatency(t, c.id, 7)
	t.Logf("canary exec latency idle: %v", idle)
	dir := volumeDir(t)
	if d := os.Getenv("GVX_TEST_FILL_DIR"); d != "" {
		// Where the disk fill's volume lives (e.g. a tmpfs, to tell the
		// host disk's share in the canary's latency from the CPU's).
		dir = d
	}
	vol := filepath.Join(dir, "fill.ext4")
	t.Cleanup(func() { os.Remove(vol) })
	gvx(t, "volume", "create", "--size", "64M", vol)
	for _, b := range []struct {
		kind, want string
		extra      []string
	}{
		{"fork", "BOMB-FORK-START", nil},
		{"mem", "BOMB-MEM-MIB", nil},
		{"fd", "BOMB-FDS", nil},
		{"spin", "BOMB-SPIN-THREADS", nil},
		{"disk", "BOMB-INODES", volMount(vol, "/data")},
	} {
		t.Run(b.kind, func(t *testing.T) {
			id := "sec-res-" + b.kind
			attackSandbox(t, id, append([]string{"--memory-limit", strconv.Itoa(256 << 20), "--cpus", "1"}, b.extra...)...)
			done := make(chan string, 1)
			t0 := time.Now()
			go func() { done <- attack(t, id, "bomb", b.kind, "12s") }()
			select {
			case out := <-done:
				done <- out
			case <-time.After(time.Second):
			}
			stop := make(chan struct{})
			lat := make(chan []time.Duration)
			go func() { lat <- latencySamples(t, c.id, stop) }()
			out := <-done
			took := time.Since(t0)
			close(stop)
			ds := <-lat
			busy := pct(ds, 50)
			t.Logf("%s bomb (%v): canary exec latency over %d samples p50 %v p95 %v max %v (idle %v: p50 %.1f×, p95 %.1f×)",
				b.kind, took.Round(time.Millisecond), len(ds), busy, pct(ds, 95), pct(ds, 100), idle, float64(busy)/float64(idle), float64(pct(ds, 95))/float64(idle))
			if !strings.Contains(out, b.want) {
				t.Errorf("%s bomb did not run: %q", b.kind, out)
			}
			if len(ds) < 3 {
				t.Errorf("%s bomb: only %d canary samples during the abuse", b.kind, len(ds))
			}
			switch b.kind {
			case "mem":
				most := 0
				for _, m := range regexp.MustCompile(`(?m)^BOMB-MEM-MIB (\d+)`).FindAllStringSubmatch(out, -1) {
					n, _ := strconv.Atoi(m[1])
					most = max(most, n)
				}
				t.Logf("memory bomb reached %d MiB in a 256 MiB sandbox", most)
				if most > 320 {
					t.Errorf("memory bomb held %d MiB in a 256 MiB sandbox", most)
				}
			case "disk":
				if !strings.Contains(out, "no space left") {
					t.Errorf("disk fill did not end with ENOSPC: %q", out)
				}
			}
			_, _ = e.ctrResult(context.Background(), "task", "kill", "-s", "KILL", id)
			// Idle again once the abuser is gone: the machine's own load
			// (other users of a shared node) is not the abuser's doing.
			after := execLatency(t, c.id, 5)
			base := max(idle, after)
			t.Logf("%s bomb: canary idle %v before, %v after; p50 %.1f× the larger", b.kind, idle, after, float64(busy)/float64(base))
			if busy > 3*base {
				t.Errorf("%s bomb: canary exec latency p50 %v over 3× idle (%v before, %v after)", b.kind, busy, idle, after)
			}
			c.check(t)
		})
	}
}
