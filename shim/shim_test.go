package shim

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gvxrun/gvx/api"
)

func TestCheckTraversable(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{base, filepath.Dir(base)} { // t.TempDir makes both 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	closed := filepath.Join(base, "closed")
	target := filepath.Join(closed, "rootfs")
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	err := checkTraversable(target, 100000)
	if err == nil || !strings.Contains(err.Error(), closed) || !strings.Contains(err.Error(), "chmod o+x") {
		t.Errorf("err = %v, want it to name %s and the fix", err, closed)
	}
	if err := os.Chmod(closed, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := checkTraversable(target, 100000); err != nil {
		t.Errorf("traversable path refused: %v", err)
	}
}

func TestTaskSentry(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "task1")
	bin := t.TempDir()
	sentry, front := filepath.Join(bin, api.SentryBinary), filepath.Join(bin, api.RuntimeBinary)
	for _, f := range []string{sentry, front} {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link, err := taskSentry(filepath.Join(t.TempDir(), "other"), sentry, "", true)
	if target, _ := os.Readlink(link); err != nil || target != front {
		t.Errorf("task in a running sandbox: link -> %q (%v), want gvx-runtime", target, err)
	}
	link, err = taskSentry(dir, sentry, "--network=none", false)
	if err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(link); err != nil || target != sentry {
		t.Errorf("link %s -> %q (%v), want gvx-sentry", link, target, err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, api.FlagsFile)); err != nil || string(data) != "--network=none" {
		t.Errorf("flags %q (%v)", data, err)
	}
	// A sentry root below the same directory keeps it.
	if err := os.Mkdir(filepath.Join(dir, "ns"), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := releaseTaskSentry(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(link); !os.IsNotExist(err) {
		t.Errorf("link still there: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "ns")); err != nil {
		t.Fatal(err)
	}
	if err := releaseTaskSentry(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("task dir still there: %v", err)
	}
}

// A namespace directory removed by another task's release between the
// two steps of a create does not fail the create.
func TestMkdirInNamespaceDirRace(t *testing.T) {
	// Tasks of one namespace, each made and released over and over: a
	// release removes its dir, then the namespace dir if it is empty
	// (once per task, as the shim's release does), racing the others'
	// creates in it.
	parent := filepath.Join(t.TempDir(), "ns")
	const workers, cycles = 4, 500
	var removed, failed atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < cycles; i++ {
				dir := filepath.Join(parent, fmt.Sprintf("task-%d-%d", w, i))
				if err := mkdirInNamespaceDir(dir, 0o711); err != nil {
					if failed.Add(1) == 1 {
						t.Logf("first failure: %v", err)
					}
					continue
				}
				if err := os.Remove(dir); err != nil {
					t.Error(err)
					return
				}
				if os.Remove(parent) == nil {
					removed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if removed.Load() < workers {
		t.Fatalf("the namespace dir was removed %d times during the creates: the race hardly ran", removed.Load())
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d creates failed while the namespace dir was being removed", n, workers*cycles)
	}
}
