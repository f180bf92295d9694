package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
)

// TestSentryExecWaiter: gvx-sentry's own detached exec — what gvx-runtime
// falls back to when it cannot run an exec itself — leaves its waiter
// standing for the process on the host: a gvx-sentry gvx-exec-wait that
// holds no privilege from its start, forwards the SIGTERM it gets to the
// process inside and exits with the process's status.
func TestSentryExecWaiter(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	const id = "sxw"
	startDetached(t, id, "sleep", "600")

	dir := t.TempDir()
	p := specs.Process{Args: []string{"sh", "-c", `trap "exit 9" TERM; touch /tmp/trapped; while :; do sleep 0.1; done`},
		Cwd: "/", Env: []string{"PATH=/bin:/usr/bin"}}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "process.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	// The waiter's parent, this gvx-sentry exec, exits at once: the test
	// reaps the waiter, as the shim would.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	root := filepath.Join(harness.State.SentryRoot(id), testNS)
	pidFile := filepath.Join(dir, "pid")
	// Its stdio goes to the exec'd process (a pipe would stay open as
	// long as the process runs): a file.
	stdio, err := os.Create(filepath.Join(dir, "stdio"))
	if err != nil {
		t.Fatal(err)
	}
	defer stdio.Close()
	cmd := exec.Command(filepath.Join(e.gvxBin, api.SentryBinary), "--root="+root, "--platform=systrap", "--log="+filepath.Join(dir, "log.json"),
		"exec", "--detach", "--process", filepath.Join(dir, "process.json"), "--pid-file", pidFile, id)
	cmd.Stdout, cmd.Stderr = stdio, stdio
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(stdio.Name())
		t.Fatalf("gvx-sentry exec: %v: %s", err, out)
	}
	data, err = os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("pid file %q: %v", data, err)
	}
	exited := make(chan unix.WaitStatus, 1)
	go func() {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil)
		exited <- ws
	}()
	cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if args := strings.Split(string(cmdline), "\x00"); len(args) < 3 || args[1] != api.SentryWaitCommand || args[2] != id {
		t.Errorf("exec's host process %d runs %q, want %s %s", pid, args, api.SentryWaitCommand, id)
	}
	checkDropped(t, api.SentryWaitCommand, pid)

	// Once the trap is set, SIGTERM to the waiter reaches the process.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, _, err := e.ctr(context.Background(), "task", "exec", "--exec-id", "probe", id, "test", "-e", "/tmp/trapped"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the exec'd process never set its trap: %v", err)
		}
	}
	if err := unix.Kill(pid, unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case ws := <-exited:
		if !ws.Exited() || ws.ExitStatus() != 9 {
			t.Errorf("waiter after SIGTERM: status %v (exit %d, signal %v), want exit 9 (the process's trap)", ws, ws.ExitStatus(), ws.Signal())
		}
	case <-time.After(20 * time.Second):
		_ = unix.Kill(pid, unix.SIGKILL)
		t.Fatal("the waiter did not exit 20 s after SIGTERM")
	}
}
