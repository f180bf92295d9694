package podjoin

import (
	"os"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/sentry/internal/statetest"
)

// TestStatePath: EnterCgroup reads, locks and rewrites the files
// runsc's own save wrote (a gVisor upgrade that renames them fails here,
// not in a pod).
func TestStatePath(t *testing.T) {
	root := t.TempDir()
	statetest.Save(t, root, "sb1", "sb1", os.Getpid(), container.Running, &specs.Spec{})
	id := container.FullID{SandboxID: "sb1", ContainerID: "sb1"}
	for _, ext := range []string{"state", "lock"} {
		if _, err := os.Stat(statePath(root, id, ext)); err != nil {
			t.Errorf("runsc's %s file is not at %s: %v", ext, statePath(root, id, ext), err)
		}
	}
	c, err := container.Load(root, id, container.LoadOpts{SkipCheck: true, Exact: true})
	if err != nil || c.ID != "sb1" {
		t.Fatalf("load: %v %v", c, err)
	}
}
