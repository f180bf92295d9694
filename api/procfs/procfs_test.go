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
