package main

import (
	"os"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/internal/statetest"
)

// TestRootGone: gvx-runtime answers the kill and the delete of a sandbox's
// root container whose sandbox has exited (gVisor's own state file): the
// kill with api.NotRunning, the delete by removing the container's state
// and lock files. A live sandbox, a container in another's sandbox,
// poststop hooks and a disk-backed overlay go to gvx-sentry.
func TestRootGone(t *testing.T) {
	t.Setenv(api.FlagsEnv, "--platform=systrap --overlay2=root:memory")
	dead := statetest.DeadPid(t)
	root := t.TempDir()
	saveRoot(t, root, "c1", "c1", dead, container.Running, "/run/ctl.sock")
	state := api.SentryRoot(root).SandboxState("c1")
	lock := strings.TrimSuffix(state, api.StateSuffix) + ".lock"
	if err := os.WriteFile(lock, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	c := command{root: root, sub: "kill"}
	handled, err := c.rootGoneKill("c1")
	if !handled || err == nil || !strings.Contains(err.Error(), api.NotRunning) {
		t.Errorf("kill of a gone sandbox's root container: %v, %v", handled, err)
	}
	c.sub = "delete"
	if handled, err := c.rootGoneDelete("c1"); !handled || err != nil {
		t.Fatalf("delete: %v, %v", handled, err)
	}
	for _, p := range []string{state, lock} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", p, err)
		}
	}
	if handled, _ := c.rootGoneDelete("c1"); handled {
		t.Error("a container with no state taken for one")
	}

	for _, tc := range []struct {
		name  string
		pid   int
		sb    string
		hooks *specs.Hooks
		flags string
	}{
		{"sandbox alive", os.Getpid(), "c2", nil, "--overlay2=root:memory"},
		{"in another's sandbox", dead, "other", nil, "--overlay2=root:memory"},
		{"poststop hooks", dead, "c2", &specs.Hooks{Poststop: []specs.Hook{{Path: "/bin/true"}}}, "--overlay2=root:memory"},
		{"overlay on disk", dead, "c2", nil, "--overlay2=root:self"},
		{"no overlay flag", dead, "c2", nil, "--platform=systrap"},
	} {
		t.Setenv(api.FlagsEnv, tc.flags)
		root := t.TempDir()
		statetest.Save(t, root, "c2", tc.sb, tc.pid, container.Running, &specs.Spec{Hooks: tc.hooks, Process: &specs.Process{Args: []string{"sleep"}}})
		c := command{root: root, sub: "delete"}
		if handled, _ := c.rootGoneDelete("c2"); handled {
			t.Errorf("%s: delete taken", tc.name)
		}
		if tc.name == "sandbox alive" || tc.name == "in another's sandbox" {
			if handled, _ := c.rootGoneKill("c2"); handled {
				t.Errorf("%s: kill taken", tc.name)
			}
		}
	}
	if handled, _ := (command{root: t.TempDir()}).rootGoneKill("none"); handled {
		t.Error("no state file: kill taken")
	}
}
