// Package statetest writes gVisor container states for tests.
//
// The packages that decide from gVisor's state whether a container has
// stopped or its sandbox is gone are tested against real state files
// (container.Load reads them), written here as runsc's create would.
package statetest

import (
	"os/exec"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/sandbox"
)

// Save writes gVisor's state of container id, in sandbox sb whose host
// process is pid, to root.
func Save(t testing.TB, root, id, sb string, pid int, status container.Status, spec *specs.Spec) {
	t.Helper()
	c := &container.Container{
		ID:      id,
		Spec:    spec,
		Sandbox: &sandbox.Sandbox{ID: sb},
		Status:  status,
		Saver:   container.StateFile{RootDir: root, ID: container.FullID{SandboxID: sb, ContainerID: id}},
	}
	c.Sandbox.Pid.Store(pid)
	SaveContainer(t, c)
}

// SaveContainer writes gVisor's state of c to c.Saver's root, as runsc
// does.
func SaveContainer(t testing.TB, c *container.Container) {
	t.Helper()
	if err := c.Saver.LockForNew(); err != nil {
		t.Fatal(err)
	}
	defer c.Saver.UnlockOrDie()
	if err := c.Saver.SaveLocked(c); err != nil {
		t.Fatal(err)
	}
}

// DeadPid returns the pid of a process that has exited and been reaped.
func DeadPid(t testing.TB) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}
