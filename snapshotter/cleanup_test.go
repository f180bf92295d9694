package snapshotter

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCleanup reclaims orphaned images and abandoned staging and
// deletion files, and keeps every snapshot's image.
func TestCleanup(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	committed(t, s, "base", "", nil)
	if _, err := s.Prepare(ctx, "work", "base"); err != nil {
		t.Fatal(err)
	}
	keep := files(t, s)
	for _, f := range []string{"999", "rm-7-0123", stagingPrefix + "abandoned"} {
		if err := os.WriteFile(filepath.Join(s.snapDir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if got := files(t, s); strings.Join(got, ",") != strings.Join(keep, ",") {
		t.Errorf("after Cleanup: %v, want %v", got, keep)
	}
	checkConsistent(t, s)
}

// TestCleanupSparesInFlightClone runs Cleanup while a Prepare has its
// clone staged (between cloning and the metadata transaction): the clone
// must survive and the Prepare succeed.
func TestCleanupSparesInFlightClone(t *testing.T) {
	root := t.TempDir()
	s := open(t, root)
	committed(t, s, "base", "", nil)
	s.Close()

	ctx := context.Background()
	var cleaned, staged int
	var hooked *Snapshotter
	s, err := New(ctx, root, Config{DefaultSize: testSize, Hook: func(ctx context.Context, p string) {
		if p != HookPrepareCloned {
			return
		}
		staged = len(stagingFiles(t, hooked))
		if err := hooked.Cleanup(ctx); err != nil {
			t.Error(err)
		}
		cleaned++
	}})
	if err != nil {
		t.Fatal(err)
	}
	hooked = s
	defer s.Close()
	if _, err := s.Prepare(ctx, "c", "base"); err != nil {
		t.Fatal(err)
	}
	if cleaned != 1 || staged != 1 {
		t.Fatalf("Cleanup ran %d times with %d staged clones, want once with 1", cleaned, staged)
	}
	if _, err := s.Mounts(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	checkConsistent(t, s)
}

// stagingFiles lists the new-* files in ROOT/snapshots.
func stagingFiles(t *testing.T, s *Snapshotter) []string {
	var out []string
	for _, f := range files(t, s) {
		if strings.HasPrefix(f, stagingPrefix) {
			out = append(out, f)
		}
	}
	return out
}
