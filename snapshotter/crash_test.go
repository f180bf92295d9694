package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/containerd/v2/core/snapshots"
)

// The crash helper is this test binary re-executed with these variables:
// it opens the snapshotter at ROOT with a hook that sends itself SIGKILL
// at POINT, then runs OP. Exit code 3 means the point was never reached.
const (
	helperPointEnv = "GVX_SNAPSHOTTER_TEST_CRASH_POINT"
	helperRootEnv  = "GVX_SNAPSHOTTER_TEST_CRASH_ROOT"
	helperOpEnv    = "GVX_SNAPSHOTTER_TEST_CRASH_OP"
)

// crashHelper is the helper process's main.
func crashHelper() int {
	ctx := context.Background()
	point := os.Getenv(helperPointEnv)
	hook := func(_ context.Context, p string) {
		if p == point {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
	s, err := New(ctx, os.Getenv(helperRootEnv), Config{DefaultSize: testSize, Hook: hook})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	op := strings.Fields(os.Getenv(helperOpEnv))
	switch op[0] {
	case "prepare":
		_, err = s.Prepare(ctx, op[1], op[2])
	case "view":
		_, err = s.View(ctx, op[1], op[2])
	case "prepare-sized": // a new size: makes a new template
		_, err = s.Prepare(ctx, op[1], "", snapshots.WithLabels(map[string]string{snapshots.LabelSnapshotMaxSize: op[2]}))
	case "commit":
		err = s.Commit(ctx, op[1], op[2])
	case "remove":
		err = s.Remove(ctx, op[1])
	case "open": // New already ran recovery
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	return 3
}

// runCrash runs the crash helper and requires it to die of SIGKILL.
func runCrash(t *testing.T, root, point, op string) {
	t.Helper()
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), helperPointEnv+"="+point, helperRootEnv+"="+root, helperOpEnv+"="+op)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("crash helper (%s at %s) did not die: %v\n%s", op, point, err, out)
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("crash helper (%s at %s): %v, want death by SIGKILL\n%s", op, point, err, out)
	}
}

// TestCrash kills a process with SIGKILL at every hook point and checks
// that the next start finds metadata and files consistent, with the
// operation either fully done or not done at all, and that the
// snapshotter keeps working.
func TestCrash(t *testing.T) {
	cases := []struct {
		point, op string
		want      []string // snapshots after restart
	}{
		{HookPrepareCloned, "prepare c base", nil},
		{HookPrepareRenamed, "prepare c base", nil},
		{HookPrepareCommitted, "prepare c base", []string{"c=Active"}},
		{HookPrepareRenamed, "view v base", nil},
		{HookPrepareCommitted, "view v base", []string{"v=View"}},
		{HookTemplateStaged, "prepare-sized r 75497472", nil},
		{HookPrepareRenamed, "prepare-sized r 75497472", nil},
		{HookCommitSynced, "commit w2 work", []string{"work=Active"}},
		{HookCommitInTxn, "commit w2 work", []string{"work=Active"}},
		{HookRemoveCommitted, "remove work", []string{"-work"}},
		{HookCleanupRenamed, "open", nil},
	}
	for _, c := range cases {
		t.Run(c.point+"/"+strings.Fields(c.op)[0], func(t *testing.T) {
			root := t.TempDir()
			s := open(t, root)
			committed(t, s, "base", "", nil)
			if _, err := s.Prepare(context.Background(), "work", "base"); err != nil {
				t.Fatal(err)
			}
			// Leftovers for recovery to reclaim: an orphaned image (as a
			// Remove killed before deleting its file leaves) and a clone
			// that was being made.
			for _, f := range []string{"999", stagingPrefix + "abandoned"} {
				if err := os.WriteFile(filepath.Join(s.snapDir, f), []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			before := keys(t, s)
			s.Close()

			runCrash(t, root, c.point, c.op)

			s = open(t, root)
			checkConsistent(t, s)
			want := map[string]bool{}
			for _, k := range before {
				want[k] = true
			}
			for _, k := range c.want {
				if strings.HasPrefix(k, "-") {
					delete(want, k[1:]+"=Active")
				} else {
					want[k] = true
				}
			}
			got := keys(t, s)
			if len(got) != len(want) {
				t.Errorf("snapshots after restart: %v, want %v plus %v", got, before, c.want)
			}
			for _, k := range got {
				if !want[k] {
					t.Errorf("snapshots after restart: %v, want %v plus %v", got, before, c.want)
					break
				}
			}
			// Still usable: the interrupted operation can be redone.
			ctx := context.Background()
			if _, err := s.Prepare(ctx, "after", "base"); err != nil {
				t.Fatal(err)
			}
			if err := s.Remove(ctx, "after"); err != nil {
				t.Fatal(err)
			}
			checkConsistent(t, s)
		})
	}
}
