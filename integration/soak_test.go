package integration

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/integration/harness"
)

// soakGrowth bounds how much containerd and the pool servers may grow over
// the soak (after a warmup): descriptors, and RSS (Go's heap comes and
// goes by a few MiB between collections).
var soakGrowth = harness.Growth{FDs: 8, RSS: 24 << 20}

// TestFaultSoak: 100 create→start→exec→destroy cycles (GVX_SOAK_CYCLES),
// each a task in its own sandbox, a warm pool's or an image pool's, half
// of them with a fault — kill -9 of the task's shim, Sentry, gofer or
// monitor, or of the pool server, between create and start, while it runs
// or during an exec — and one containerd restart (kill -9 and start)
// while a task runs (harness.RunSoak). Random, seeded (GVX_SOAK_SEED,
// else the time; the seed and every cycle are logged). Every fault that
// hits a task fails exactly its cycle, nothing else fails (the pool
// server's death and the containerd restart are survived), every exit is
// reported, nothing is left on the host afterwards (processes, mounts,
// loop devices, cgroups, state dirs, fifos, and nothing a janitor dry run
// would reclaim), and containerd's and the last pool servers' descriptors
// and RSS stay within soakGrowth. It runs on a containerd of its own.
func TestFaultSoak(t *testing.T) {
	requireEnv(t)
	cycles := 100
	if v := os.Getenv("GVX_SOAK_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("GVX_SOAK_CYCLES: %v", err)
		}
		cycles = n
	}
	seed := time.Now().UnixNano()
	if v := os.Getenv("GVX_SOAK_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("GVX_SOAK_SEED: %v", err)
		}
		seed = n
	}
	t.Logf("seed %d (GVX_SOAK_SEED=%d repeats this soak)", seed, seed)
	res, err := harness.RunSoak(context.Background(), e.Bins, e.images, "gvxsoak", harness.SoakOptions{Cycles: cycles, Seed: seed, Logf: t.Logf})
	if err != nil {
		t.Fatalf("soak stopped (seed %d): %v", seed, err)
	}
	t.Logf("%d cycles in %s; faults injected %v; %d failed cycles", len(res.Cycles), res.Took.Round(time.Second), res.Injected, res.Failed)
	for _, u := range res.Unexpected {
		t.Errorf("outcome does not match the fault: %s", u)
	}
	for _, l := range res.LostExits {
		t.Errorf("lost exit: %s", l)
	}
	if n := res.TaskFaults(); res.Failed != n {
		t.Errorf("%d failed cycles, %d faults that hit a task (seed %d)", res.Failed, n, seed)
	}
	if cycles >= 100 {
		for _, f := range []string{harness.FaultShim, harness.FaultSentry, harness.FaultGofer, harness.FaultMonitor, harness.FaultPoolServer, harness.FaultContainerd} {
			if res.Injected[f] == 0 {
				t.Errorf("no %s fault injected in %d cycles", f, cycles)
			}
		}
	}
	grown, measured := res.Grown(cycles/10, cycles/10, soakGrowth)
	for _, m := range measured {
		t.Log(m)
	}
	for _, g := range grown {
		t.Errorf("grew more than %d fds / %d MiB: %s", soakGrowth.FDs, soakGrowth.RSS>>20, g)
	}
	if len(res.Leaks) > 0 {
		t.Errorf("left behind on the host after the soak (seed %d; containerd's log: %s):\n  %s", seed, res.Log, strings.Join(res.Leaks, "\n  "))
	}
}
