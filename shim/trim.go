package shim

import (
	"cmp"
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

// trimDelay is how long a shim stays quiet (no start or delete of a
// task or exec) before it gives back what the work left.
const trimDelay = 2 * time.Second

// trimmer returns the heap a shim's work left to the host once the shim
// goes quiet: preparing a task (the bundle's spec, the rootfs mount, the
// runtime's calls and their output) or running an exec leaves a few
// hundred KiB free but mapped, which the Go runtime's scavenger does not
// all return for an idle shim, and a node runs one shim per sandbox
// (docs/benchmarks.md, density). Work in a row (a pod's containers, an
// agent's execs) pushes the one pending trim back, so a busy shim pays
// nothing for it.
type trimmer struct {
	mu    sync.Mutex
	timer *time.Timer
	// delay and trim replace trimDelay and giveBack in tests.
	delay time.Duration
	trim  func()
}

// soon schedules the trim trimDelay from now, or moves a pending one
// there.
func (t *trimmer) soon() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer != nil {
		t.timer.Reset(cmp.Or(t.delay, trimDelay))
		return
	}
	delay, trim := trimDelay, giveBack
	if t.delay != 0 {
		delay, trim = t.delay, t.trim
	}
	t.timer = time.AfterFunc(delay, trim)
}

// giveBack collects twice (the first only moves sync.Pools to their
// victim caches) and returns the free spans to the host.
func giveBack() {
	runtime.GC()
	debug.FreeOSMemory()
}
