package shim

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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

// The kill of a container's processes after its monitor died names the
// container by id under the task's sentry root, which the next task of
// that id reuses: the task's delete (endAll.stop) waits for a kill under
// way, and no kill starts once it has begun.
func TestKillAllEndsBeforeDelete(t *testing.T) {
	reapChildren(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "killed")
	runtime := filepath.Join(dir, "runtime")
	script := "#!/bin/sh\nsleep 0.3\necho \"$@\" >> " + marker + "\n"
	if err := os.WriteFile(runtime, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	task := &gvxTask{binary: runtime, rec: &record{ID: "t1", Namespace: "ns", RuncRoot: filepath.Join(dir, "root")}}
	started := make(chan struct{})
	go func() {
		close(started)
		task.killAllInSandbox(context.Background(), 42)
	}()
	<-started
	// Let the kill begin (its runtime sleeps).
	deadline := time.Now().Add(5 * time.Second)
	for !killBegun(task) {
		if time.Now().After(deadline) {
			t.Fatal("the kill never began")
		}
		time.Sleep(5 * time.Millisecond)
	}
	task.endAll.stop(context.Background())
	b, err := os.ReadFile(marker)
	if err != nil || strings.Count(string(b), "\n") != 1 {
		t.Fatalf("the delete went on before the kill under way was over: marker %q (%v)", b, err)
	}
	// A monitor's exit seen after the delete began kills nothing.
	task.killAllInSandbox(context.Background(), 42)
	fresh := &gvxTask{binary: runtime, rec: task.rec}
	fresh.endAll.stop(context.Background())
	fresh.killAllInSandbox(context.Background(), 43)
	if b, _ = os.ReadFile(marker); strings.Count(string(b), "\n") != 1 {
		t.Errorf("kills after the delete began ran: %q", b)
	}
}

func killBegun(task *gvxTask) bool {
	task.endAll.mu.Lock()
	defer task.endAll.mu.Unlock()
	return task.endAll.done != nil
}

// A kill waits for a checkpoint of its task under way, but not for ever.
func TestLockForKill(t *testing.T) {
	task := &gvxTask{rec: &record{ID: "t1"}}
	if !task.lockForKill(context.Background()) {
		t.Fatal("a free lock was not taken")
	}
	task.checkpointing.Unlock()
	task.checkpointing.Lock() // a checkpoint
	go func() {
		time.Sleep(50 * time.Millisecond)
		task.checkpointing.Unlock()
	}()
	t0 := time.Now()
	if !task.lockForKill(context.Background()) || time.Since(t0) < 40*time.Millisecond {
		t.Fatalf("the kill did not wait for the checkpoint (%v)", time.Since(t0))
	}
	// A checkpoint that does not end: the kill goes ahead when its
	// context does (or after killWait).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if task.lockForKill(ctx) {
		t.Error("took a lock a checkpoint holds")
	}
}
