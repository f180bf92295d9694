package shim

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/containerd/v2/pkg/sys/reaper"
)

// reapChildren reaps the test's children as the shim's task service does
// (runReaped waits through the reaper).
func reapChildren(t *testing.T) {
	t.Helper()
	ch := make(chan os.Signal, 32)
	signal.Notify(ch, syscall.SIGCHLD)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				_ = reaper.Reap()
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() { signal.Stop(ch); close(done) })
}

// runtimeKill gives the runtime nothing in the task's bundle: it may run
// after containerd removed the bundle, and gVisor makes a --log file's
// directory, which made the bundle again (bench/churn's "mkdir …: file
// exists"). The runtime here records its arguments.
func TestRuntimeKillLeavesBundleAlone(t *testing.T) {
	reapChildren(t)
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	runtime := filepath.Join(dir, "runtime")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + args + "\n"
	if err := os.WriteFile(runtime, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := runtimeKill(context.Background(), runtime, filepath.Join(dir, "root"), "task1", 9, "--all"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(args)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(b))
	want := []string{"--root", filepath.Join(dir, "root"), "kill", "--all", "task1", "9"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("runtime args %q, want %q", got, want)
	}
	for _, a := range got {
		if a == "--log" {
			t.Errorf("runtimeKill passes --log (%q): gVisor would make its directory", got)
		}
	}
	// A failing runtime's stderr is in the error.
	if err := os.WriteFile(runtime, []byte("#!/bin/sh\necho 'container task1 not found' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	err = runtimeKill(context.Background(), runtime, filepath.Join(dir, "root"), "task1", 9, "--all")
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("err = %v, want the runtime's stderr", err)
	}
}
