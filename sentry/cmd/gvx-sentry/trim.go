package main

import (
	"runtime"
	"runtime/debug"
	"time"

	"gvisor.dev/gvisor/pkg/sentry/seccheck"

	"github.com/gvxrun/gvx/sentry/prefilter"
)

// trimDelay is how long after its start a sandbox process gives back what
// its start-up left: the Sentry boots in tens of ms, a guest's first
// commands follow.
const trimDelay = 2 * time.Second

// trimAfterStart has a long-lived sandbox process (gVisor's boot, the
// Sentry; its gofer) return to the host, once, the heap its start-up
// used and dropped (spec and flag parsing, seccomp filter compilation,
// mount setup): two collections (the first only moves sync.Pools to
// their victim caches) and the free spans released. Without it the Go
// runtime keeps them until its background scavenger gets to them, which
// for an idle sandbox is never all of them (docs/benchmarks.md, density).
func trimAfterStart() {
	time.AfterFunc(trimDelay, func() {
		runtime.GC()
		debug.FreeOSMemory()
	})
}

// goferSetup is what gvx-sentry adds to gVisor's gofer before it runs:
// one P (the gofer's work is the Sentry's occasional file requests; with
// directfs the Sentry opens most files itself, and a request blocked in
// a syscall does not hold the P), which also stops Go's periodic
// GOMAXPROCS update from reading the cgroup, and the trim.
func goferSetup() {
	runtime.GOMAXPROCS(1)
	installPrefilter(prefilter.Gofer)
	trimAfterStart()
}

// bootSetup is what gvx-sentry adds to gVisor's boot before it runs.
func bootSetup() {
	installCompat()
	installPrefilter(prefilter.Sentry)
	// gVisor's loader registers its runtime-monitoring points (seccheck:
	// two per system call, each with maps of its fields) first thing,
	// ≈ 15–20 ms on a VM with slow page faults, after the boot's
	// capability, chroot and mount steps, which mostly wait on the gofer.
	// Started here on another thread, it overlaps them; the loader's own
	// call waits for it (the same sync.Once) and does the same work.
	go seccheck.Initialize()
	trimAfterStart()
}

// installPrefilter gives gVisor the seccomp program of process kind k
// compiled ahead of time (package prefilter), so that the process does not
// compile its filter as it locks itself down (≈ 15–28 ms on the Sentry's
// start path). Without one gVisor compiles it, as before, and its debug
// log says "No precompiled program found".
func installPrefilter(k prefilter.Kind) {
	_, _ = prefilter.Install(k)
}
