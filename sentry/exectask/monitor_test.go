package exectask

import (
	"os"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/internal/statetest"
)

func TestWaiting(t *testing.T) {
	root := t.TempDir()
	if exit, ok := waiting(root, "t1"); ok || exit != 137 {
		t.Errorf("deleted before start: %d, %v", exit, ok)
	}
	statetest.Save(t, root, "sb", "sb", os.Getpid(), container.Running, &specs.Spec{})
	r := &record.Record{ID: "t1", Sandbox: "sb", Bundle: "/b"}
	if err := r.Save(root); err != nil {
		t.Fatal(err)
	}
	if exit, ok := waiting(root, "t1"); !ok || exit != 0 {
		t.Errorf("created: %d, %v", exit, ok)
	}
	r.Killed = 15
	if err := r.Save(root); err != nil {
		t.Fatal(err)
	}
	if exit, ok := waiting(root, "t1"); ok || exit != 143 {
		t.Errorf("killed with SIGTERM before start: %d, %v", exit, ok)
	}
	// Its sandbox died before the start (kill -9 of the pool sandbox's
	// Sentry), or its state is gone: nothing will start the task, and its
	// monitor must not wait for ever.
	statetest.Save(t, root, "dead", "dead", statetest.DeadPid(t), container.Running, &specs.Spec{})
	for _, sb := range []string{"dead", "none"} {
		r := &record.Record{ID: "t-" + sb, Sandbox: sb, Bundle: "/b"}
		if err := r.Save(root); err != nil {
			t.Fatal(err)
		}
		if exit, ok := waiting(root, r.ID); ok || exit != 137 {
			t.Errorf("sandbox %s: %d, %v; want 137, not waiting", sb, exit, ok)
		}
	}
}
