package pool

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
)

// TestWaitBooters: a process with "--root ROOT" on its command line (a
// gvx-sentry its killed server left booting) holds the wait until it
// exits; other roots and the "--root=ROOT" form (a sandbox's own
// processes) do not.
func TestWaitBooters(t *testing.T) {
	root := t.TempDir()
	cmd := exec.Command("sh", "-c", "sleep 0.5; true", "gvx-sentry", "--root", root, "create")
	other := exec.Command("sh", "-c", "sleep 5; true", "runsc-sandbox", "--root="+root, "--root", root+"x")
	for _, c := range []*exec.Cmd{cmd, other} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	if got := booters(root); !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Fatalf("booters(%s) = %v, want [%d]", root, got, cmd.Process.Pid)
	}
	t0 := time.Now()
	waitBooters(context.Background(), api.SentryRoot(root), 10*time.Second)
	if took := time.Since(t0); took < 200*time.Millisecond || took > 5*time.Second {
		t.Errorf("waitBooters returned after %s; want once the 0.5 s booter has exited", took)
	}
	<-done
	if got := booters(root); len(got) != 0 {
		t.Errorf("booters after the exit: %v", got)
	}
	// Bounded: a booter that outlives the bound is given up on.
	stuck := exec.Command("sh", "-c", "sleep 5; true", "gvx-sentry", "--root", root, "start")
	if err := stuck.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stuck.Process.Kill(); _ = stuck.Wait() }()
	t0 = time.Now()
	waitBooters(context.Background(), api.SentryRoot(root), 300*time.Millisecond)
	if took := time.Since(t0); took > 2*time.Second {
		t.Errorf("waitBooters took %s with a bound of 300 ms", took)
	}
}
