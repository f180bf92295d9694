package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestCompT(t *testing.T) {
	for _, c := range []struct {
		in   uint16
		want int64
	}{{0, 0}, {5, 5}, {0x1fff, 8191}, {1<<13 | 3, 24}, {2<<13 | 1, 64}} {
		if got := compT(c.in); got != c.want {
			t.Errorf("compT(%#x) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestCPUWindow switches the kernel's process accounting on, runs a
// process that spins for a while and checks the window finds it under its
// name with about its CPU time.
func TestCPUWindow(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("process accounting needs root")
	}
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "gvxacctspin")
	if err := os.WriteFile(bin, sh, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := startCPUWindow()
	if err != nil {
		t.Fatal(err)
	}
	spin := exec.Command(bin, "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	out, runErr := spin.CombinedOutput()
	by, err := w.stop()
	if err != nil {
		t.Fatal(err)
	}
	if runErr != nil {
		t.Fatalf("spin: %v: %s", runErr, out)
	}
	use := by["gvxacctspin"]
	got := use.cpu
	if use.exits != 1 {
		t.Errorf("window counts %d exits of the spinning process, want 1", use.exits)
	}
	spent := spin.ProcessState.UserTime() + spin.ProcessState.SystemTime()
	if got == 0 {
		t.Fatalf("no CPU recorded for the spinning process; window: %v", by)
	}
	if got < spent/2 || got > spent*2+20*time.Millisecond {
		t.Errorf("window has %v for the spinning process, which reports %v", got, spent)
	}
}
