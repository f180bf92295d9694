package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/internal/testfs"
)

// hostState is what a gvx sandbox could leave behind on the host
// (harness.HostState).
type hostState = harness.HostState

// snapshot is the host state of the tasks of x in the test namespace.
func snapshot(x *env) hostState { return harness.Snapshot(x.Containerd, testNS) }

// leaked lists what is in after but not in before.
func leaked(before, after hostState) []string { return harness.Leaked(before, after) }

// checkNoLeaks registers a cleanup (run after the test's own cleanups)
// that fails the test if anything of a sandbox is left on the host.
// Teardown is asynchronous in places (shim exit), so it polls briefly.
func checkNoLeaks(t *testing.T) {
	t.Helper()
	requireEnv(t)
	before := snapshot(e)
	t.Cleanup(func() {
		var l []string
		deadline := time.Now().Add(10 * time.Second)
		for {
			l = leaked(before, snapshot(e))
			if len(l) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		for i, x := range l {
			// "loop device: /dev/loopN FILE": name who still has it mounted.
			if f := strings.Fields(strings.TrimPrefix(x, "loop device: ")); strings.HasPrefix(x, "loop device: ") && len(f) > 0 {
				l[i] += "\n    held by: " + strings.Join(testfs.Holders(strings.TrimPrefix(f[0], "/dev/")), "\n    ")
			}
		}
		if len(l) > 0 {
			t.Errorf("left behind on the host:\n  %s", strings.Join(l, "\n  "))
		}
	})
}

// mountsMatching lists mount points starting with prefix, deepest first.
func mountsMatching(prefix string) []string { return harness.MountsUnder(prefix) }
