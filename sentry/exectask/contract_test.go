package exectask

import (
	"errors"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/sentry/internal/contractroot"
	"github.com/gvxrun/gvx/sentry/internal/statetest"
	"github.com/gvxrun/gvx/sentry/sandboxctl"
)

// TestContract: a task deleted before it started exits with contract.json's
// exit_killed; a kill whose sandbox is gone says its not_running phrase.
func TestContract(t *testing.T) {
	c := contractroot.Load(t)
	root := t.TempDir()
	if exit, ok := waiting(root, "t1"); ok || exit != c.ExitKilled {
		t.Errorf("deleted before start: exits %d, %v; contract.json says %d", exit, ok, c.ExitKilled)
	}
	statetest.Save(t, root, "sb", "sb", statetest.DeadPid(t), container.Running, &specs.Spec{})
	sb, err := container.Load(root, container.FullID{SandboxID: "sb", ContainerID: "sb"}, container.LoadOpts{SkipCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := sandboxctl.NotRunning(errors.New("signal"), sb, 7, nil); !strings.Contains(err.Error(), c.Name("not_running")) {
		t.Errorf("kill in a gone sandbox: %v, want %q", err, c.Name("not_running"))
	}
}
