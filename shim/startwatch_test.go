package shim

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/api/runtime/task/v3"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/checkpoint"
)

// TestStartWatch: while a restored task's start waits to open its stdout
// FIFO for writing and no process reads the FIFO (its client died), the
// shim reads it so that the open goes through; while a process holds it
// open (the client), the shim leaves it alone.
func TestStartWatch(t *testing.T) {
	saved := startWatchAfter
	startWatchAfter = 50 * time.Millisecond
	t.Cleanup(func() { startWatchAfter = saved })
	dir := t.TempDir()
	out := filepath.Join(dir, "stdout")
	if err := unix.Mkfifo(out, 0o600); err != nil {
		t.Fatal(err)
	}
	s := &service{tasks: map[string]*gvxTask{}}
	tk := &gvxTask{req: &task.CreateTaskRequest{ID: "r", Stdout: out}, rec: &record{ID: "r"}, restoring: &checkpoint.Manifest{}}

	// The client, alive: it holds the FIFO open for reading.
	rd, err := os.OpenFile(out, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	client := exec.Command("sleep", "30")
	client.ExtraFiles = []*os.File{rd}
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	rd.Close()
	if !hasOpener(out) {
		t.Fatal("a process holding the FIFO open is not found")
	}
	// The counter is the process's: this run's reads are what it grew by.
	before := startStandIns.Load()
	stop := s.watchStart(context.Background(), tk)
	time.Sleep(200 * time.Millisecond)
	stop()
	if n := startStandIns.Load() - before; n != 0 {
		t.Fatalf("the shim read a FIFO its client reads (%d)", n)
	}
	_ = client.Process.Kill()
	_ = client.Wait()
	if hasOpener(out) {
		t.Fatal("the FIFO is still found open after its only other opener exited")
	}

	// The client gone: the start's open for writing blocks until the
	// shim reads the FIFO.
	stop = s.watchStart(context.Background(), tk)
	opened := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(out, os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the start's open of its unread stdout FIFO still blocks after 5 s")
	}
	stop()
	if n := startStandIns.Load() - before; n != 1 {
		t.Errorf("the shim read %d FIFOs, want 1", n)
	}
}
