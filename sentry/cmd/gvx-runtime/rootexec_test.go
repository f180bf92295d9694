package main

import (
	"os"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/sandbox"

	"github.com/gvxrun/gvx/sentry/internal/statetest"
)

// saveRoot writes gVisor's state of container id in sandbox sb (host
// process pid, control socket ctl) to root, as runsc writes it.
func saveRoot(t *testing.T, root, id, sb string, pid int, status container.Status, ctl string) {
	t.Helper()
	c := &container.Container{
		ID:      id,
		Spec:    &specs.Spec{Process: &specs.Process{Args: []string{"sleep"}, Cwd: "/"}},
		Sandbox: &sandbox.Sandbox{ID: sb, UID: 0, GID: 0, ControlSocketPath: ctl},
		Status:  status,
		Saver:   container.StateFile{RootDir: root, ID: container.FullID{SandboxID: sb, ContainerID: id}},
	}
	c.Sandbox.Pid.Store(pid)
	statetest.SaveContainer(t, c)
}

// TestLoadRoot: gvx-runtime reads gVisor's own state file of a running
// sandbox's root container, and leaves everything else to gvx-sentry: a
// container in another's sandbox, one not running, a sandbox whose
// process is gone, a state without a control socket.
func TestLoadRoot(t *testing.T) {
	root := t.TempDir()
	saveRoot(t, root, "sb", "sb", os.Getpid(), container.Running, "/run/ctl.sock")
	st, ok := loadRoot(root, "sb")
	if !ok || st.Sandbox.ControlSocketPath != "/run/ctl.sock" || st.Spec.Process.Args[0] != "sleep" {
		t.Fatalf("a running root container: %+v, %v", st, ok)
	}
	saveRoot(t, root, "sub", "sb", os.Getpid(), container.Running, "/run/ctl.sock")
	if _, ok := loadRoot(root, "sub"); ok {
		t.Error("a container in another's sandbox taken for a root container")
	}
	for _, tc := range []struct {
		name   string
		pid    int
		status container.Status
		ctl    string
	}{
		{"created", os.Getpid(), container.Created, "/run/ctl.sock"},
		{"paused", os.Getpid(), container.Paused, "/run/ctl.sock"},
		{"sandbox gone", statetest.DeadPid(t), container.Running, "/run/ctl.sock"},
		{"no control socket", os.Getpid(), container.Running, ""},
	} {
		root := t.TempDir()
		saveRoot(t, root, "c1", "c1", tc.pid, tc.status, tc.ctl)
		if _, ok := loadRoot(root, "c1"); ok {
			t.Errorf("%s: taken for a running root container", tc.name)
		}
	}
	if _, ok := loadRoot(t.TempDir(), "none"); ok {
		t.Error("no state file: taken for a running root container")
	}
}
