package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCtrRun: the acceptance command of the runtime issue.
func TestCtrRun(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	r, err := e.ctrResult(context.Background(), "run", "--rm", "--runtime", runtime, busybox, "t1",
		"sh", "-c", "uname -r; echo out; echo err >&2; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 3 {
		t.Errorf("exit code = %d, want 3 (stderr %q)", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "gvisor") || lines[1] != "out" {
		t.Errorf("stdout = %q, want gVisor's kernel release then \"out\"", r.stdout)
	}
	if strings.TrimSpace(r.stderr) != "err" {
		t.Errorf("stderr = %q, want \"err\"", r.stderr)
	}
}

// TestSignalExitCodes: a signal death is reported as 128+signal, and the
// init's own exit codes pass through unchanged.
func TestSignalExitCodes(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0}, {"exit 1", 1}, {"exit 255", 255}, {"kill -9 $$", 137}, {"kill -15 $$", 143},
	} {
		r, err := e.ctrResult(context.Background(), "run", "--rm", "--runtime", runtime, busybox, "sig", "sh", "-c", tc.script)
		if err != nil {
			t.Fatal(err)
		}
		if r.code != tc.want {
			t.Errorf("%q: exit code %d, want %d (stderr %q)", tc.script, r.code, tc.want, r.stderr)
		}
	}
}

// startDetached runs a long-lived task and returns its sandbox pid.
func startDetached(t *testing.T, id string, args ...string) int {
	t.Helper()
	cleanupTask(t, id)
	full := append([]string{"run", "-d", "--runtime", runtime, busybox, id}, args...)
	mustCtr(t, full...)
	return taskPid(t, id)
}

func taskPid(t *testing.T, id string) int {
	t.Helper()
	out := mustCtr(t, "task", "ls")
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == id {
			pid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("task ls: bad pid in %q", l)
			}
			return pid
		}
	}
	t.Fatalf("task %s not listed:\n%s", id, out)
	return 0
}

func taskStatus(t *testing.T, id string) string {
	t.Helper()
	out := mustCtr(t, "task", "ls")
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == id {
			return f[2]
		}
	}
	return ""
}

func waitStatus(t *testing.T, id, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if taskStatus(t, id) == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("task %s never reached %s (now %q)", id, want, taskStatus(t, id))
}

// TestExecKillPsMetrics covers the rest of the task API through ctr.
func TestExecKillPsMetrics(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	startDetached(t, "t2", "sh", "-c", `trap "echo got-term; exit 7" TERM; while true; do sleep 0.1; done`)

	r, err := e.ctrResult(context.Background(), "task", "exec", "--exec-id", "e1", "t2", "sh", "-c", "echo exec-out; echo exec-err >&2; exit 4")
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 4 || strings.TrimSpace(r.stdout) != "exec-out" || strings.TrimSpace(r.stderr) != "exec-err" {
		t.Errorf("exec: code %d stdout %q stderr %q; want 4, exec-out, exec-err", r.code, r.stdout, r.stderr)
	}

	// A sandbox's root container has no monitor: gvx-runtime execs over
	// the sandbox's control socket, and its waiter stands for the exec.
	checkExecWaiter(t, "t2")

	ps := mustCtr(t, "task", "ps", "t2")
	if n := len(strings.Split(strings.TrimSpace(ps), "\n")); n < 2 {
		t.Errorf("task ps lists no process:\n%s", ps)
	}

	metrics := mustCtr(t, "task", "metrics", "t2")
	if !strings.Contains(metrics, "memory") || !strings.Contains(metrics, "pids.current") {
		t.Errorf("task metrics lacks memory and pids:\n%s", metrics)
	}

	mustCtr(t, "task", "kill", "-s", "TERM", "t2")
	waitStatus(t, "t2", "STOPPED")
	r, err = e.ctrResult(context.Background(), "task", "rm", "t2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.stderr, "exit code 7") && !strings.Contains(r.stdout, "7") {
		t.Errorf("task rm after TERM: want exit code 7 reported, got stdout %q stderr %q", r.stdout, r.stderr)
	}
}

// TestTTY runs a task with a terminal: the guest sees a tty on its stdio,
// output arrives through the console, and the console size ctr sets
// (ResizePty) reaches the guest.
func TestTTY(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	checkTTY(t, "tty1")
}

// checkTTY runs a tty task through ctr (extra ctr run flags in extra) and
// checks that it has a terminal, gets the console size set through
// ResizePty, and its exit code passes through.
func checkTTY(t *testing.T, id string, extra ...string) {
	t.Helper()
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("util-linux script not installed")
	}
	ctr := fmt.Sprintf("stty rows 31 cols 101; %s --address %s --namespace %s run --fifo-dir %s --rm -t --runtime %s %s %s %s sh -c '[ -t 0 ] && [ -t 1 ] && echo is-a-tty; for i in $(seq 50); do s=$(stty size 2>/dev/null) && [ -n \"$s\" ] && [ \"$s\" != \"0 0\" ] && break; sleep 0.1; done; echo size=$s; exit 5'",
		filepath.Join(e.ctrdBin, "ctr"), filepath.Join(e.dir, "c.sock"), testNS, filepath.Join(e.dir, "fifo"), runtime, strings.Join(extra, " "), busybox, id)
	// script gives ctr a pseudo-terminal; its stdin stays open until the
	// task is done so ctr does not see EOF early.
	cmd := exec.Command("script", "-qec", ctr, "/dev/null")
	cmd.Env = append(os.Environ(), "PATH="+e.path())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.Output()
	_ = stdin.Close()
	code := cmd.ProcessState.ExitCode()
	if !strings.Contains(string(out), "is-a-tty") {
		t.Errorf("tty task output %q (err %v), want is-a-tty", out, err)
	}
	// ctr resizes the console right after the task starts: the guest
	// polls until the size has arrived. Before it has, busybox's stty size
	// may print nothing and still succeed (it dies with an error only if
	// errno is not EINVAL), so an empty answer means "not yet" too.
	if !strings.Contains(string(out), "size=31 101") {
		t.Errorf("tty task output %q, want the console size 31 101 set through ResizePty", out)
	}
	if code != 5 {
		t.Errorf("tty task exit code %d, want 5", code)
	}
}

func sleepShort() { time.Sleep(100 * time.Millisecond) }

// TestSignalRestartsOpen: a blocking open of a FIFO is restarted after a
// signal whose handler has SA_RESTART, as on Linux. gVisor returned EINTR,
// which made runc's init inside a sandbox fail now and then to open its exec
// FIFO ("docker run" exiting 125 in TestDockerEightEpisodes).
func TestSignalRestartsOpen(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir := volumeDir(t)
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "fifoopen"), "./testdata/fifoopen")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the test program: %v\n%s", err, out)
	}
	r, err := e.ctrResult(context.Background(), "run", "--rm", "--runtime", runtime,
		"--mount", "type=bind,src="+dir+",dst=/t,options=rbind:ro", busybox, "fifo", "/t/fifoopen")
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 0 || strings.TrimSpace(r.stdout) != "ok" {
		t.Errorf("exit code %d, output %q (stderr %q), want 0 and \"ok\"", r.code, r.stdout, r.stderr)
	}
}
