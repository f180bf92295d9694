package main

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWatchRestore runs watchRestore in a child process (this test binary
// again) that stands for a detached restore which never finishes, with a
// sleep as the sandbox it started: the watchdog kills the sleep and ends
// the process with runsc's fatal exit status and an error naming the
// timeout.
func TestWatchRestore(t *testing.T) {
	if os.Getenv("GVX_TEST_WATCH_RESTORE") != "" {
		restoreTimeout = 200 * time.Millisecond
		sleep := exec.Command("sleep", "60")
		if err := sleep.Start(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(os.Getenv("GVX_TEST_WATCH_RESTORE"), []byte(strconv.Itoa(sleep.Process.Pid)), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Args = []string{"gvx-sentry", "restore", "--image-path", "/nonexistent", "--detach", "c1"}
		watchRestore()
		_ = sleep.Wait()
		time.Sleep(10 * time.Second) // the watchdog exits first
		os.Exit(0)
	}
	pidFile := t.TempDir() + "/pid"
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchRestore$")
	cmd.Env = append(os.Environ(), "GVX_TEST_WATCH_RESTORE="+pidFile)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 128 || !strings.Contains(string(out), "restore did not finish within 200ms") {
		t.Fatalf("the restore that never finishes: %v, %s; want exit 128 naming the timeout", err, out)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(data))
	// Killed: gone, or a zombie its new parent has yet to reap.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the restore's child %d still runs after the watchdog: %s", pid, stat)
		}
	}
}

// TestWatchRestoreAttached: a restore without --detach (which lasts as
// long as its container) is not watched.
func TestWatchRestoreAttached(t *testing.T) {
	saved, savedArgs := restoreTimeout, os.Args
	defer func() { restoreTimeout, os.Args = saved, savedArgs }()
	restoreTimeout = time.Millisecond
	os.Args = []string{"gvx-sentry", "restore", "--image-path", "/nonexistent", "c1"}
	watchRestore()
	time.Sleep(100 * time.Millisecond) // a watchdog would have ended this test binary
}
