package shim

import (
	"os"
	"path/filepath"
	"strings"
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
	parent := filepath.Join(t.TempDir(), "ns")
	stop := make(chan struct{})
	done := make(chan struct{})
	removed := 0
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				if os.Remove(parent) == nil { // as a release does, when empty
					removed++
				}
			}
		}
	}()
	failed := 0
	for i := 0; i < 1000; i++ {
		dir := filepath.Join(parent, "task")
		if err := mkdirInNamespaceDir(dir, 0o711); err != nil {
			failed++
			continue
		}
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	<-done
	if removed == 0 {
		t.Fatal("the namespace dir was never removed during the creates: the race did not run")
	}
	if failed > 0 {
		t.Errorf("%d of 1000 creates failed while the namespace dir was being removed", failed)
	}
}
