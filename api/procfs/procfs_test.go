package procfs

import (
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
