package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"

	sdk "github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/rollout"
	"github.com/gvxrun/gvx/sandbox/control"
)

// TestOrphanedPause: the engine marks the pauses it makes of a kernel
// (gVisor says nothing about them), so that a sandbox an engine paused
// for a checkpoint when its process died runs again once another engine
// adopts it, and its destroy does not wait on tasks that cannot die of
// SIGKILL. (A gvx serve SIGKILLed during a checkpoint left the sandbox
// frozen after its restart, and its removal timing out.)
func TestOrphanedPause(t *testing.T) {
	checkNoLeaks(t)
	eng, ctx, _ := rolloutEnvWith(t, rollout.Options{})
	id := "orphp"
	cleanupTask(t, id)
	mustCtr(t, "run", "-d", "--runtime", runtime, busybox, id, "sh", "-c",
		"i=0; while true; do i=$((i+1)); echo $i > /tmp/n; sleep 0.05; done")
	sb, err := eng.Adopt(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	mark := api.SentryRoot(filepath.Join(harness.State.SentryRoot(id), testNS)).EnginePaused(id)
	h, err := eng.CheckpointAsync(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	// Paused for the save, which goes on in the background.
	if b, err := os.ReadFile(mark); err != nil || string(b) != procfs.Identity(os.Getpid()) {
		t.Errorf("the pause mark during a checkpoint: %q, %v; want this process's identity", b, err)
	}
	if err := eng.Wait(ctx, h.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Errorf("the pause mark after the checkpoint: %v, want it gone", err)
	}

	// What a process that died during a checkpoint leaves: the kernel
	// paused, the mark naming a process that exited.
	crashPause := func() {
		t.Helper()
		ctl := dialSandboxControl(t, id)
		defer ctl.Close()
		if err := ctl.Pause(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(mark, []byte(exitedIdentity(t)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n := counter(t, id)
	if n < 1 {
		t.Fatalf("the guest's counter: %d", n)
	}
	crashPause()
	eng2, ctx2, _ := rolloutEnvWith(t, rollout.Options{})
	sb2, err := eng2.Adopt(ctx2, id)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the adopted sandbox running again", func() bool { return counter(t, id) > n })
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Errorf("the pause mark after the adoption resumed the sandbox: %v, want it gone", err)
	}

	crashPause()
	start := time.Now()
	if err := eng2.Destroy(ctx2, sb2); err != nil {
		t.Errorf("destroy a sandbox an exited process paused: %v", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("destroy a sandbox an exited process paused took %s; its kill should not wait", d)
	}
	if err := eng.Destroy(ctx, sb); err != nil {
		t.Errorf("destroy through the first engine (already gone): %v", err)
	}
}

// TestResumeStuckNoMark: the blind resume of a kill that has not ended
// its task (Engine.ResumeStuck) leaves no pause mark when it fails — here
// on a kernel that was not paused, whose Sentry the resume ends. Before,
// a failed resume marked the pause as this process's, and the next
// process to find the sandbox took the mark for a pause it had to undo.
func TestResumeStuckNoMark(t *testing.T) {
	checkNoLeaks(t)
	eng, ctx, _ := rolloutEnvWith(t, rollout.Options{})
	id := "stucknomark"
	cleanupTask(t, id)
	mustCtr(t, "run", "-d", "--runtime", runtime, busybox, id, "sleep", "600")
	mark := api.SentryRoot(filepath.Join(harness.State.SentryRoot(id), testNS)).EnginePaused(id)
	if err := eng.ResumeStuck(ctx, id); err == nil {
		t.Fatal("the resume of a kernel that was not paused succeeded")
	}
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Errorf("a pause mark after a failed resume: %v, want none", err)
	}
}

// TestKillWithControlClient: a sandbox exits as soon as it is killed
// while a client holds an idle connection to its control server — here
// the rollout engine, after a checkpoint. (gVisor's control server waited
// 15 s for such clients before the Sentry exited: a kill through
// containerd took 15 s.)
func TestKillWithControlClient(t *testing.T) {
	checkNoLeaks(t)
	eng, ctx, _ := rolloutEnvWith(t, rollout.Options{NoTargets: true})
	id := "ctlkill"
	cleanupTask(t, id)
	mustCtr(t, "run", "-d", "--runtime", runtime, busybox, id, "sh", "-c", "while true; do sleep 0.05; done")
	sb, err := eng.Adopt(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Checkpoint(ctx, sb); err != nil {
		t.Fatal(err)
	}
	wait, err := sb.Task().Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	mustCtr(t, "task", "kill", "--all", "--signal", "SIGKILL", id)
	select {
	case st := <-wait:
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("the sandbox exited %s after its kill (status %d)", d, st.ExitCode())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sandbox did not exit 30 s after its kill")
	}
	if err := eng.Destroy(ctx, sb); err != nil {
		t.Errorf("destroy: %v", err)
	}
}

// counter reads the number the guest of TestOrphanedPause counts in
// /tmp/n, or -1 if the exec that reads it does not answer within 2 s (a
// paused kernel holds it up).
func counter(t *testing.T, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := e.ctrResult(ctx, "task", "exec", "--exec-id", fmt.Sprintf("x%d", execSeq.Add(1)), id, "cat", "/tmp/n")
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(r.stdout))
	if err != nil {
		return -1
	}
	return n
}

// dialSandboxControl connects to gVisor's control socket of task id's
// sandbox (in the test namespace), as the rollout engine does.
func dialSandboxControl(t *testing.T, id string) *control.Client {
	t.Helper()
	root := api.SentryRoot(filepath.Join(harness.State.SentryRoot(id), testNS))
	data, err := os.ReadFile(root.SandboxState(id))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Sandbox struct {
			ControlSocketPath string `json:"controlSocketPath"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal(data, &st); err != nil || st.Sandbox.ControlSocketPath == "" {
		t.Fatalf("the state file of %s: no control socket (%v)", id, err)
	}
	ctl, err := control.Dial(st.Sandbox.ControlSocketPath)
	if err != nil {
		t.Fatal(err)
	}
	return ctl
}

// exitedIdentity is the procfs.Identity of a process that has exited.
func exitedIdentity(t *testing.T) string {
	t.Helper()
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	id := procfs.Identity(p.Pid)
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestRemoveSuperseded: a backing a rollback replaced, left because the
// process that rolled back died before its background destroy, is
// destroyed when a later process adopts the sandbox — and only then: a
// live owner destroys its own. (A gvx serve SIGKILLed after a rollback
// left the replaced backing, paused, for good: neither the re-adopted
// sandbox nor the sweep of unknown sandboxes named it.)
func TestRemoveSuperseded(t *testing.T) {
	checkNoLeaks(t)
	eng, ctx, _ := rolloutEnvWith(t, rollout.Options{NoTargets: true})
	sb := adoptRunning(t, eng, ctx, "supx", nil, "sh", "-c", "while true; do sleep 0.05; done")
	h, err := eng.Checkpoint(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Rollback(ctx, sb, h.ID); err != nil {
		t.Fatal(err)
	}
	old := current(sb)
	// A newer backing of the sandbox, made by a process that has exited:
	// a fork relabelled as the sandbox's, with a dead owner.
	forks, err := eng.Fork(ctx, h.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Destroy(ctx, forks[0]) })
	newer := current(forks[0])
	set := func(owner string) {
		t.Helper()
		if _, err := forks[0].Container().SetLabels(ctx, map[string]string{rollout.LabelSandbox: sb.ID, rollout.LabelOwner: owner}); err != nil {
			t.Fatal(err)
		}
	}
	c := mustClient(t)
	adopt := func() *rollout.Sandbox {
		t.Helper()
		ct, err := rollout.FindBacking(ctx, c, sb.ID)
		if err != nil || ct.ID() != newer {
			t.Fatalf("the sandbox's backing: %v %v, want %s", ct, err, newer)
		}
		eng2, ctx2, _ := rolloutEnvWith(t, rollout.Options{NoTargets: true})
		sb2, err := eng2.Adopt(ctx2, newer)
		if err != nil {
			t.Fatal(err)
		}
		if err := eng2.RemoveSuperseded(ctx2, sb2); err != nil {
			t.Errorf("remove the superseded backings: %v", err)
		}
		return sb2
	}
	// Its owner runs (this process): the replaced backing is its own.
	set(procfs.Identity(os.Getpid()))
	adopt()
	if _, err := c.LoadContainer(ctx, old); err != nil {
		t.Fatalf("the replaced backing %s of a live owner: %v, want it kept", old, err)
	}
	// Its owner gone: the replaced backing goes, the current one stays.
	set(exitedIdentity(t))
	sb2 := adopt()
	if _, err := c.LoadContainer(ctx, old); err == nil {
		t.Errorf("the replaced backing %s is still there", old)
	}
	if st, err := sb2.Task().Status(ctx); err != nil || st.Status != client.Running {
		t.Errorf("the current backing %s: %v %v, want running", newer, st.Status, err)
	}
}

// TestSDKCloseStuckPause: the SDK's Close of a sandbox whose kernel a
// process paused and died before marking the pause (no
// api.SentryRoot.EnginePaused) still ends it: a SIGKILL that has not
// ended the init in 10 s (rollout.StuckAfter) resumes the kernel. Before, Close waited 30 s,
// then its delete until its own 2-minute limit, and failed (a gvx serve
// DELETE answered 500 and the sandbox stayed).
func TestSDKCloseStuckPause(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	sb, err := c.New(context.Background(), sdk.Config{ID: "sdkstuck", Image: busyboxArchive(), Cmd: []string{"sleep", "100000"}})
	if err != nil {
		t.Fatal(err)
	}
	ctl := dialSandboxControl(t, "sdkstuck")
	if err := ctl.Pause(); err != nil {
		t.Fatal(err)
	}
	ctl.Close()
	start := time.Now()
	if err := sb.Close(context.Background()); err != nil {
		t.Errorf("close a sandbox paused without a mark: %v", err)
	}
	if d := time.Since(start); d > rollout.StuckAfter+5*time.Second {
		t.Errorf("close a sandbox paused without a mark took %s", d)
	}
}
