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

// The same task id may run in two namespaces: each has its own task
// directory and pool link in the id's sentry directory, and releasing
// one leaves the other's; the directory goes with the last.
func TestSameIDTwoNamespaces(t *testing.T) {
	l := api.Layout{Dir: t.TempDir()}
	bin := t.TempDir()
	sentry := filepath.Join(bin, api.SentryBinary)
	if err := os.WriteFile(sentry, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	pool := t.TempDir()
	var links []string
	for _, ns := range []string{"ns1", "ns2"} {
		if _, err := taskSentry(l.TaskDir(ns, "t1"), sentry, "--flags-of-"+ns, false); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(pool, filepath.Join(l.SentryRoot("t1"), ns)); err != nil {
			t.Fatal(err)
		}
		links = append(links, filepath.Join(l.SentryRoot("t1"), ns))
	}
	if err := releaseTaskSentry(l.TaskDir("ns1", "t1")); err != nil {
		t.Fatal(err)
	}
	if err := removePoolLink(links[0]); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(l.TaskDir("ns2", "t1"), api.FlagsFile)); err != nil || string(data) != "--flags-of-ns2" {
		t.Errorf("ns2's flags after ns1's release: %q (%v)", data, err)
	}
	if _, err := os.Stat(filepath.Join(l.TaskDir("ns2", "t1"), sentryLinkName)); err != nil {
		t.Errorf("ns2's gvx-sentry link after ns1's release: %v", err)
	}
	if target, err := os.Readlink(links[1]); err != nil || target != pool {
		t.Errorf("ns2's pool link after ns1's release: %q (%v)", target, err)
	}
	if err := releaseTaskSentry(l.TaskDir("ns2", "t1")); err != nil {
		t.Fatal(err)
	}
	if err := removePoolLink(links[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.SentryRoot("t1")); !os.IsNotExist(err) {
		t.Errorf("the id's sentry directory after both releases: %v", err)
	}
	if _, err := os.Stat(pool); err != nil {
		t.Errorf("the pool sandbox's root went with a link to it: %v", err)
	}
	// A record written before links were per namespace names the id's
	// directory: removed whole.
	old := l.SentryRoot("t2")
	if err := os.MkdirAll(filepath.Join(old, "ns1"), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := removePoolLink(old); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("an old record's link directory: %v", err)
	}
}
