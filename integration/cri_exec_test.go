package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
)

// TestCRIExecSyncTimeout: an ExecSync with a 1 s timeout (what kubelet's
// exec probes and critest's "execSync with timeout" send) returns once the
// timeout passes, not when the command ends, and the command it started is
// dead afterwards: containerd's CRI kills it with SIGKILL, which must reach
// the process inside the sandbox, not just the host process standing for
// it (gvx-runtime's waiter, which holds no privilege from its start).
func TestCRIExecSyncTimeout(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	pod, podCfg := x.runPod(t, "pexec", "gvx")
	app := x.createContainer(t, pod, podCfg, "app", []string{"sleep", "600"}, nil)
	x.must(t, "start", app)

	// The exec of a pod's container goes through its monitor; the waiter
	// gvx-runtime leaves for it holds no privilege from the moment it is
	// seen.
	seen := make(chan bool, 1)
	go func() { seen <- checkWaiter(t, api.RuntimeWaitCommand, app) }()
	t0 := time.Now()
	r := x.run(t, "exec", "--sync", "--timeout", "1", app, "sleep", "247")
	took := time.Since(t0)
	if !<-seen {
		t.Errorf("exec in %s: no %s on the host stood for it", app, api.RuntimeWaitCommand)
	}
	t.Logf("ExecSync with a 1 s timeout returned after %s: exit %d %q", took.Round(time.Millisecond), r.code, strings.TrimSpace(r.stderr))
	if r.code == 0 || !strings.Contains(r.stderr, "timeout 1s exceeded") {
		t.Errorf("ExecSync past its timeout: exit %d stderr %q, want containerd's \"timeout 1s exceeded\"", r.code, r.stderr)
	}
	if took > 5*time.Second {
		t.Errorf("ExecSync with a 1 s timeout took %s", took)
	}
	if ps := x.must(t, "exec", "--sync", app, "ps", "-o", "pid,args"); strings.Contains(ps, "sleep 247") {
		t.Errorf("the timed-out command still runs in the container:\n%s", ps)
	}
	x.must(t, "rmp", "-f", pod)
}

// TestCtrExecKill: `ctr task kill --exec-id` with SIGKILL ends the exec'd
// process inside the sandbox (its exec returns 137 at once), and one with
// SIGTERM reaches a process that traps it — in a task with a sandbox of its
// own, and in one started as a process in an image pool's sandbox (whose
// execs gvx-runtime's monitor runs).
func TestCtrExecKill(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	startDetached(t, "xk", "sleep", "600")
	checkExecKill(t, "xk")
	p := startImagePool(t, 1)
	runAdopted(t, p, "xkpool", nil, "sleep", "600")
	if !asProcess(t, "xkpool") {
		t.Fatal("xkpool did not start as a process in the image pool's sandbox")
	}
	checkExecKill(t, "xkpool")
}

// checkExecKill kills execs of running task id with SIGKILL and SIGTERM.
func checkExecKill(t *testing.T, id string) {
	t.Helper()
	for _, tc := range []struct {
		sig, script, mark string
		want              int
	}{
		{"KILL", "sleep 247", "sleep 247", 137},
		{"TERM", `trap "exit 9" TERM; while :; do sleep 0.1; done`, "while :", 9},
	} {
		done := make(chan result, 1)
		go func() {
			r, err := e.ctrResult(context.Background(), "task", "exec", "--exec-id", "x"+tc.sig, id, "sh", "-c", tc.script)
			if err != nil {
				r.code, r.stderr = -1, err.Error()
			}
			done <- r
		}()
		// Wait until the exec's process runs inside the sandbox.
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(mustCtr(t, "task", "exec", "--exec-id", "ps"+tc.sig, id, "ps", "-o", "args"), tc.mark) {
			if time.Now().After(deadline) {
				t.Fatalf("exec %q never showed up in ps", tc.script)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t0 := time.Now()
		mustCtr(t, "task", "kill", "-s", tc.sig, "--exec-id", "x"+tc.sig, id)
		select {
		case r := <-done:
			t.Logf("%s: exec killed with SIG%s: exit %d after %s", id, tc.sig, r.code, time.Since(t0).Round(time.Millisecond))
			if r.code != tc.want {
				t.Errorf("exec killed with SIG%s: exit %d (stderr %q), want %d", tc.sig, r.code, r.stderr, tc.want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("exec still running 20 s after SIG%s", tc.sig)
		}
		if ps := mustCtr(t, "task", "exec", "--exec-id", "after"+tc.sig, id, "ps", "-o", "args"); strings.Contains(ps, tc.mark) {
			t.Errorf("SIG%s to exec: its process still runs:\n%s", tc.sig, ps)
		}
	}
}

// TestCtrExecKillTTY: an exec with a terminal goes through runsc's own
// detached exec, which gvx has write the guest pid too: `ctr task kill -s
// KILL --exec-id` ends its process inside the sandbox as well.
func TestCtrExecKillTTY(t *testing.T) {
	requireEnv(t)
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("util-linux script not installed")
	}
	checkNoLeaks(t)
	startDetached(t, "xkt", "sleep", "600")
	ctr := fmt.Sprintf("%s --address %s --namespace %s task exec --fifo-dir %s -t --exec-id xtty xkt sleep 249",
		filepath.Join(e.ctrdBin, "ctr"), filepath.Join(e.dir, "c.sock"), testNS, filepath.Join(e.dir, "fifo"))
	cmd := exec.Command("script", "-qec", ctr, "/dev/null")
	cmd.Env = append(os.Environ(), "PATH="+e.path())
	stdin, err := cmd.StdinPipe() // open until the exec ends: ctr sees no EOF
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(mustCtr(t, "task", "exec", "--exec-id", "pstty", "xkt", "ps", "-o", "args"), "sleep 249") {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("the tty exec never showed up in ps")
		}
		time.Sleep(100 * time.Millisecond)
	}
	mustCtr(t, "task", "kill", "-s", "KILL", "--exec-id", "xtty", "xkt")
	select {
	case <-done:
		if code := cmd.ProcessState.ExitCode(); code != 137 {
			t.Errorf("tty exec killed with SIGKILL: exit %d, want 137", code)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("tty exec still running 20 s after SIGKILL")
	}
	if ps := mustCtr(t, "task", "exec", "--exec-id", "aftertty", "xkt", "ps", "-o", "args"); strings.Contains(ps, "sleep 249") {
		t.Errorf("SIGKILL to a tty exec: its process still runs:\n%s", ps)
	}
}
