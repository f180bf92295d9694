package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/sentry/internal/statetest"
)

func TestNotRunning(t *testing.T) {
	root := t.TempDir()
	spec := &specs.Spec{Process: &specs.Process{Args: []string{"sleep"}}}
	statetest.Save(t, root, "gone", "gone", statetest.DeadPid(t), container.Running, spec)
	statetest.Save(t, root, "stopped", "stopped", os.Getpid(), container.Stopped, spec)
	statetest.Save(t, root, "running", "running", os.Getpid(), container.Running, spec)
	for id, want := range map[string]string{
		"gone":    "the sandbox of container gone is gone",
		"stopped": "container stopped has stopped",
		"running": "",
		"none":    "",
	} {
		if got := notRunning(root, id, "sandbox is not running"); got != want {
			t.Errorf("notRunning(%s) = %q, want %q", id, got, want)
		}
	}
}

// TestNotRunningShuttingDown: a refused connection to the control server
// of a sandbox whose process still runs is a sandbox on its way out —
// not running, once the process is gone or the wait is over — while any
// other error of a live sandbox is not a verdict.
func TestNotRunningShuttingDown(t *testing.T) {
	root := t.TempDir()
	spec := &specs.Spec{Process: &specs.Process{Args: []string{"sleep"}}}
	exiting := exec.Command("sleep", "0.3")
	if err := exiting.Start(); err != nil {
		t.Fatal(err)
	}
	defer exiting.Wait()
	statetest.Save(t, root, "exiting", "exiting", exiting.Process.Pid, container.Running, spec)
	refused := "connecting to control server at PID 42: connection refused"
	if got := notRunning(root, "exiting", "signaling container: some other failure"); got != "" {
		t.Errorf("another error of a live sandbox: %q, want none", got)
	}
	start := time.Now()
	want := "the sandbox of container exiting is shutting down (its control server is closed)"
	if got := notRunning(root, "exiting", refused); got != want {
		t.Errorf("refused: %q, want %q", got, want)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d >= shutdownWait {
		t.Errorf("refused: returned after %v, want once the sandbox's process exited (≈300 ms)", d)
	}
	if exiting.ProcessState != nil || procfs.Alive(exiting.Process.Pid) {
		t.Errorf("the sandbox's process should be gone (a zombie) when notRunning returns")
	}
}

// captureStderr runs fn with os.Stderr going to a pipe and returns what fn
// wrote there.
func captureStderr(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	fn()
	os.Stderr = saved
	w.Close()
	out, _ := io.ReadAll(r)
	return string(out)
}

// TestVerdict: runsc's error goes where it went, followed by api.NotRunning
// and the reason on stderr and in the --log file, once.
func TestVerdict(t *testing.T) {
	for _, why := range []string{"the sandbox of container c1 is gone", ""} {
		var logFile bytes.Buffer
		util.ErrorLogger = &verdict{next: &logFile, why: func(string) string { return why }}
		stderr := captureStderr(t, func() {
			util.Errorf("sandbox is not running")
			util.Errorf("a second error")
		})
		var msgs []string
		for dec := json.NewDecoder(&logFile); dec.More(); {
			var line struct{ Msg string }
			if err := dec.Decode(&line); err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, line.Msg)
		}
		want := []string{"sandbox is not running", "a second error"}
		wantStderr := "sandbox is not running\na second error\n"
		if why != "" {
			want = []string{"sandbox is not running", api.NotRunning + ": " + why, "a second error"}
			wantStderr = "sandbox is not running\n" + api.NotRunning + ": " + why + "\na second error\n"
		}
		if strings.Join(msgs, "|") != strings.Join(want, "|") {
			t.Errorf("why %q: log %q, want %q", why, msgs, want)
		}
		if stderr != wantStderr {
			t.Errorf("why %q: stderr %q, want %q", why, stderr, wantStderr)
		}
	}
	util.ErrorLogger = nil
	// Without --log: stderr only.
	util.ErrorLogger = &verdict{why: func(string) string { return "container c1 has stopped" }}
	if got := captureStderr(t, func() { util.Errorf("signaling container") }); got != "signaling container\n"+api.NotRunning+": container c1 has stopped\n" {
		t.Errorf("without a log file: stderr %q", got)
	}
	util.ErrorLogger = nil
}
