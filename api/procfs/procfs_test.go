package procfs

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Error("this process is not alive")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// Not yet reaped: a zombie once it has exited.
	for deadline := time.Now().Add(5 * time.Second); Alive(pid) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if Alive(pid) {
		t.Errorf("exited, unreaped child %d counts as alive", pid)
	}
	_ = cmd.Wait()
	if Alive(pid) || Alive(0) || Alive(-1) {
		t.Error("reaped or invalid pid counts as alive")
	}
}

func TestThreads(t *testing.T) {
	tids := Threads(os.Getpid())
	found := false
	for _, tid := range tids {
		found = found || tid == os.Getpid()
	}
	if !found || len(tids) < 2 { // the Go runtime runs more than one thread
		t.Errorf("Threads(self) = %v, want the main thread and others", tids)
	}
	if got := Threads(-1); len(got) != 0 {
		t.Errorf("Threads(-1) = %v", got)
	}
}

// TestIdentity: a process's identity says it runs while it does, and not
// once it has exited, nor for its pid with another start time.
func TestIdentity(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	id := Identity(cmd.Process.Pid)
	if id == "" || !Running(id) {
		t.Fatalf("identity %q of a running process: running %v", id, Running(id))
	}
	if self := Identity(os.Getpid()); !Running(self) || self == id {
		t.Errorf("this process's identity %q", self)
	}
	if Running(fmt.Sprintf("%d:1", cmd.Process.Pid)) {
		t.Error("the pid with another start time runs")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if Running(id) {
		t.Errorf("identity %q runs after its process exited", id)
	}
	for _, bad := range []string{"", "x:1", "12", "-1:0"} {
		if Running(bad) {
			t.Errorf("Running(%q)", bad)
		}
	}
}
