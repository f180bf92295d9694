package main

import (
	"os"
	"strings"
	"testing"

	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/internal/statetest"
)

// TestRootGoneKill: gvx-runtime answers the kill of a sandbox's root
// container whose sandbox has exited (gVisor's own state file) with
// api.NotRunning, as gvx-sentry would; a live sandbox and a container in
// another's sandbox go to gvx-sentry.
func TestRootGoneKill(t *testing.T) {
	root := t.TempDir()
	saveRoot(t, root, "c1", "c1", statetest.DeadPid(t), container.Running, "/run/ctl.sock")
	c := command{root: root, sub: "kill"}
	handled, err := c.rootGoneKill("c1")
	if !handled || err == nil || !strings.Contains(err.Error(), api.NotRunning) {
		t.Errorf("kill of a gone sandbox's root container: %v, %v", handled, err)
	}
	for _, tc := range []struct {
		name    string
		pid     int
		sandbox string
	}{
		{"sandbox alive", os.Getpid(), "c2"},
		{"in another's sandbox", statetest.DeadPid(t), "other"},
	} {
		c := command{root: t.TempDir(), sub: "kill"}
		saveRoot(t, c.root, "c2", tc.sandbox, tc.pid, container.Running, "/run/ctl.sock")
		if handled, _ := c.rootGoneKill("c2"); handled {
			t.Errorf("%s: kill taken", tc.name)
		}
	}
	if handled, _ := (command{root: t.TempDir()}).rootGoneKill("none"); handled {
		t.Error("no state file: kill taken")
	}
}
