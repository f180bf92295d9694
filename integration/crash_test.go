package integration

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gvxrun/gvx/integration/harness"
)

// TestKillSandbox: kill -9 of the Sentry mid-run is reported as the task's
// exit, and deleting the task leaves nothing behind.
func TestKillSandbox(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	pid := startDetached(t, "crash1", "sleep", "600")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill sandbox %d: %v", pid, err)
	}
	waitStatus(t, "crash1", "STOPPED")
	mustCtr(t, "task", "rm", "crash1")
	mustCtr(t, "container", "rm", "crash1")
}

// TestKillShim: kill -9 of the shim mid-run; containerd notices, runs the
// shim's cleanup (Manager.Stop), which must take the sandbox down with it.
func TestKillShim(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	startDetached(t, "crash2", "sleep", "600")
	shim := shimPid(t, "crash2")
	sandbox := harness.Descendants(shim)
	if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
		t.Fatalf("kill shim %d: %v", shim, err)
	}
	// containerd reaps the task once it sees the shim's socket close.
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := e.ctrResult(context.Background(), "task", "ls")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(r.stdout, "crash2 ") || strings.Contains(r.stdout, "STOPPED") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task still listed as running after its shim died:\n%s", r.stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, _ = e.ctrResult(context.Background(), "task", "rm", "-f", "crash2")
	mustCtr(t, "container", "rm", "crash2")
	for _, pid := range sandbox {
		if p, err := readProc(pid); err == nil && p.state != "Z" {
			t.Errorf("sandbox process %d (%s, state %s) survived its shim", pid, p.name, p.state)
		}
	}
}
