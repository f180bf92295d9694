package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKillPaused: a paused task is signalled as runc's are (gVisor alone
// refuses: "cannot signal container in state paused"): a signal to its
// init is accepted and delivered at its resume; an exec's SIGKILL too,
// and then the exec's guest process is gone; SIGKILL to its init ends
// the task at once, whether it booted its own sandbox or adopted a
// pool's.
func TestKillPaused(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	id := "pausedkill"
	cleanupTask(t, id)
	mustCtr(t, "run", "-d", "--runtime", runtime, busybox, id, "sh", "-c",
		`trap 'echo term > /tmp/term; exit 3' TERM; while true; do sleep 0.05; done`)
	if r, err := e.ctrResult(context.Background(), "task", "exec", "--detach", "--exec-id", "slp", id, "sleep", "1000"); err != nil || r.code != 0 {
		t.Fatalf("exec: %v %+v", err, r)
	}
	waitIn(t, id, "pidof sleep >/dev/null && echo yes || true", "yes")
	mustCtr(t, "task", "pause", id)
	// An exec's SIGKILL and the init's SIGTERM while paused: accepted.
	mustCtr(t, "task", "kill", "-s", "KILL", "--exec-id", "slp", id)
	mustCtr(t, "task", "kill", "-s", "TERM", id)
	if st := taskStatus(t, id); st != "PAUSED" {
		t.Fatalf("after the signals the task is %s, want still PAUSED", st)
	}
	mustCtr(t, "task", "resume", id)
	waitStatus(t, id, "STOPPED")
	r, _ := e.ctrResult(context.Background(), "task", "rm", id)
	if !strings.Contains(r.stderr, "exit code 3") {
		t.Errorf("the task's exit after SIGTERM while paused: %q, want its trap's 3", r.stderr)
	}
	mustCtr(t, "container", "rm", id)

	// SIGKILL to a paused task's init ends it, a pool task's too (whose
	// signals gVisor would keep for the resume).
	p := startPool(t, 1)
	for _, opts := range [][]string{nil, {"--runtime-config-path", p.Config}} {
		mustCtr(t, append(append([]string{"run", "-d", "--runtime", runtime}, opts...), busybox, id, "sh", "-c", "while true; do sleep 0.05; done")...)
		mustCtr(t, "task", "pause", id)
		mustCtr(t, "task", "kill", "-s", "KILL", id)
		waitStatus(t, id, "STOPPED")
		if r, _ = e.ctrResult(context.Background(), "task", "rm", id); !strings.Contains(r.stderr, "exit code 137") {
			t.Errorf("the task's exit after SIGKILL while paused (%v): %q, want 137", opts, r.stderr)
		}
		mustCtr(t, "container", "rm", id)
	}
}

// TestKillPausedExec: an exec's SIGKILL while its task is paused ends
// the exec's guest process once the task runs again, not only its host
// waiter.
func TestKillPausedExec(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	id := "pausedexec"
	cleanupTask(t, id)
	mustCtr(t, "run", "-d", "--runtime", runtime, busybox, id, "sleep", "120")
	if r, err := e.ctrResult(context.Background(), "task", "exec", "--detach", "--exec-id", "slp", id, "sleep", "999"); err != nil || r.code != 0 {
		t.Fatalf("exec: %v %+v", err, r)
	}
	waitIn(t, id, "pidof sleep | wc -w", "2")
	mustCtr(t, "task", "pause", id)
	mustCtr(t, "task", "kill", "-s", "KILL", "--exec-id", "slp", id)
	mustCtr(t, "task", "resume", id)
	waitIn(t, id, "ps -o args | grep -c '^sleep 999' || true", "0")
	deleteTask(t, id)
}

// TestKillDuringCheckpoint: a SIGKILL that comes while `ctr c checkpoint
// --task` runs kills the task — before, gVisor refused it for the
// paused container and the task ran on — and the checkpoint either
// completes or fails with an error; nothing is left behind.
func TestKillDuringCheckpoint(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	img := filepath.Join(loopFS(t, "xfs"), "ws.ext4")
	gvx(t, "volume", "create", "--size", "64M", img)
	var saved int
	for i := 0; i < 5; i++ {
		id, ref := fmt.Sprintf("ckkill%d", i), fmt.Sprintf("gvx.test/ckkill:%d", i)
		cleanupTask(t, id)
		mustCtr(t, append(append([]string{"run", "-d", "--runtime", runtime}, volMount(img, "/work")...), busybox, id, "sh", "-c",
			"dd if=/dev/urandom of=/tmp/m bs=1M count=32 2>/dev/null; while true; do echo x > /work/x; sleep 0.05; done")...)
		waitIn(t, id, "test -s /work/x && echo up", "up")
		done := make(chan result, 1)
		go func() {
			r, _ := e.ctrResult(context.Background(), "container", "checkpoint", "--task", id, ref)
			done <- r
		}()
		time.Sleep(time.Duration(10+i*20) * time.Millisecond)
		if k, err := e.ctrResult(context.Background(), "task", "kill", "-s", "KILL", id); err != nil || k.code != 0 {
			t.Errorf("%s: SIGKILL during its checkpoint: %v %q", id, err, k.stderr)
		}
		select {
		case r := <-done:
			if r.code == 0 {
				saved++
			}
			t.Logf("%s: checkpoint exit %d %s", id, r.code, strings.TrimSpace(r.stderr))
		case <-time.After(90 * time.Second):
			t.Fatalf("%s: the checkpoint never returned", id)
		}
		waitStatus(t, id, "STOPPED")
		mustCtr(t, "task", "rm", id)
		mustCtr(t, "container", "rm", id)
		_, _ = e.ctrResult(context.Background(), "images", "rm", ref)
	}
	t.Logf("%d of 5 checkpoints completed before the kill took effect", saved)
}
