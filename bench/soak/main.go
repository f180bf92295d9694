// Command soak is the long fault soak: create→start→exec→destroy cycles,
// one at a time, each a task in its own sandbox, a warm pool's or an image
// pool's, half of them with a kill -9 of the task's shim, Sentry, gofer or
// monitor or of its pool's server, and one containerd restart
// (harness.RunSoak, the soak TestFaultSoak runs for 100 cycles). It
// prints the faults injected, the failed cycles against the faults that
// hit a task, the cycles whose outcome did not match their fault, the lost
// exits, what was left on the host afterwards, and the descriptors and
// RSS of containerd and the pool servers over the run.
//
//	go run ./bench/soak [-cycles 1000] [-seed N] [-max 15m] [-v]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/gvxrun/gvx/integration/harness"
)

// growth is the bound TestFaultSoak holds containerd and the pool servers to.
var growth = harness.Growth{FDs: 8, RSS: 24 << 20}

func main() {
	cycles := flag.Int("cycles", 1000, "cycles to run")
	seed := flag.Int64("seed", time.Now().UnixNano(), "seed of the cycles' kinds and faults")
	limit := flag.Duration("max", 15*time.Minute, "stop after this long (at most 15m)")
	verbose := flag.Bool("v", false, "log every cycle")
	flag.Parse()
	if *limit < 3*time.Minute || *limit > 15*time.Minute || *cycles <= 0 {
		fmt.Fprintln(os.Stderr, "bench: -max must be in [3m, 15m], -cycles positive")
		os.Exit(2)
	}
	if err := run(*cycles, *seed, *limit, *verbose); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func run(cycles int, seed int64, limit time.Duration, verbose bool) error {
	bins, images := harness.BinsFromEnv(), os.Getenv("IMAGES")
	if bins.GVX == "" || bins.Containerd == "" || images == "" {
		return fmt.Errorf("run through `make bench` (needs GVX_BIN, CONTAINERD_BIN, IMAGES)")
	}
	ictx, stop := harness.Interruptible(context.Background(), "bench")
	defer stop()
	ctx, cancel := context.WithTimeout(ictx, limit)
	defer cancel()
	// The last cycle starts early enough for the teardown to fit.
	o := harness.SoakOptions{Cycles: cycles, Seed: seed, Until: time.Now().Add(limit - 2*time.Minute)}
	if verbose {
		o.Logf = func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	}
	fmt.Printf("gvx fault soak: %d cycles, seed %d, at most %s\n", cycles, seed, limit)
	res, err := harness.RunSoak(ctx, bins, images, "gvxbenchsoak", o)
	if res == nil {
		return err
	}
	if err != nil {
		fmt.Printf("stopped early: %v\n", err)
	}
	kinds := map[string]int{}
	for _, c := range res.Cycles {
		kinds[c.Kind]++
	}
	fmt.Printf("\ncycles           %d in %s (%.2f s/cycle); tasks: %s\n", len(res.Cycles), res.Took.Round(time.Second),
		res.Took.Seconds()/float64(max(len(res.Cycles), 1)), counts(kinds))
	fmt.Printf("faults injected  %s\n", counts(res.Injected))
	fmt.Printf("failed cycles    %d (faults that hit a task: %d)\n", res.Failed, res.TaskFaults())
	fmt.Printf("unexpected       %d\n", len(res.Unexpected))
	for _, u := range res.Unexpected {
		fmt.Printf("  %s\n", u)
	}
	fmt.Printf("lost exits       %d\n", len(res.LostExits))
	for _, l := range res.LostExits {
		fmt.Printf("  %s\n", l)
	}
	fmt.Printf("leaked resources %d\n", len(res.Leaks))
	for _, l := range res.Leaks {
		fmt.Printf("  %s\n", l)
	}
	if res.Log != "" {
		fmt.Printf("  (containerd's log kept at %s)\n", res.Log)
	}
	grown, measured := res.Grown(len(res.Cycles)/10, len(res.Cycles)/10, growth)
	fmt.Printf("long-lived processes (bound: +%d fds, +%d MiB RSS; %d over it)\n", growth.FDs, growth.RSS>>20, len(grown))
	for _, m := range measured {
		fmt.Printf("  %s\n", m)
	}
	return nil
}

// counts is m as "k=v" pairs in key order.
func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for _, k := range keys {
		if s != "" {
			s += " "
		}
		s += fmt.Sprintf("%s=%d", k, m[k])
	}
	return s
}
