package snapshotter

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/volume"
)

// expectErr fails unless err is of kind (an errdefs test such as
// errdefs.IsNotFound) and its message contains every part.
func expectErr(t *testing.T, what string, err error, kind func(error) bool, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	t.Logf("%s: %v", what, err)
	if !kind(err) {
		t.Errorf("%s: %v: wrong error kind", what, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %q does not mention %q", what, err, p)
		}
	}
}

// unchanged asserts that the snapshots and image files are as before and
// consistent.
func unchanged(t *testing.T, s *Snapshotter, before []string) {
	t.Helper()
	if got := keys(t, s); strings.Join(got, ",") != strings.Join(before, ",") {
		t.Errorf("snapshots changed: %v, was %v", got, before)
	}
	checkConsistent(t, s)
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	committed(t, s, "base", "", nil)
	if _, err := s.Prepare(ctx, "work", "base"); err != nil {
		t.Fatal(err)
	}
	before := keys(t, s)

	t.Run("unknown key", func(t *testing.T) {
		_, err := s.Mounts(ctx, "nope")
		expectErr(t, "Mounts", err, errdefs.IsNotFound, "nope")
		_, err = s.Stat(ctx, "nope")
		expectErr(t, "Stat", err, errdefs.IsNotFound, "nope")
		_, err = s.Usage(ctx, "nope")
		expectErr(t, "Usage", err, errdefs.IsNotFound, "nope")
		expectErr(t, "Commit", s.Commit(ctx, "x", "nope"), errdefs.IsNotFound, "nope")
		expectErr(t, "Remove", s.Remove(ctx, "nope"), errdefs.IsNotFound, "nope")
		_, err = s.Prepare(ctx, "c", "nope")
		expectErr(t, "Prepare on unknown parent", err, errdefs.IsNotFound, "c")
		unchanged(t, s, before)
	})
	t.Run("parent not committed", func(t *testing.T) {
		_, err := s.Prepare(ctx, "c", "work")
		expectErr(t, "Prepare", err, errdefs.IsInvalidArgument, "work", "not committed")
		_, err = s.View(ctx, "v", "work")
		expectErr(t, "View", err, errdefs.IsInvalidArgument, "work", "not committed")
		unchanged(t, s, before)
	})
	t.Run("existing key", func(t *testing.T) {
		_, err := s.Prepare(ctx, "work", "base")
		expectErr(t, "Prepare", err, errdefs.IsAlreadyExists, "work")
		expectErr(t, "Commit", s.Commit(ctx, "base", "work"), errdefs.IsAlreadyExists, "base")
		unchanged(t, s, before)
	})
	t.Run("commit a committed snapshot", func(t *testing.T) {
		expectErr(t, "Commit", s.Commit(ctx, "again", "base"), errdefs.IsFailedPrecondition, "base", "only active")
		unchanged(t, s, before)
	})
	t.Run("rebase", func(t *testing.T) {
		err := s.Commit(ctx, "x", "work", snapshots.WithParent("other"))
		expectErr(t, "Commit with another parent", err, errdefs.IsNotImplemented, "rebase")
		unchanged(t, s, before)
	})
	t.Run("bad max-size label", func(t *testing.T) {
		for _, v := range []string{"abc", "-1", "4096"} {
			_, err := s.Prepare(ctx, "c", "", snapshots.WithLabels(map[string]string{snapshots.LabelSnapshotMaxSize: v}))
			expectErr(t, "Prepare with max-size "+v, err, errdefs.IsInvalidArgument, snapshots.LabelSnapshotMaxSize)
		}
		_, err := s.Prepare(ctx, "c", "base", snapshots.WithLabels(map[string]string{snapshots.LabelSnapshotMaxSize: strconv.Itoa(32 << 20)}))
		expectErr(t, "Prepare smaller than parent", err, errdefs.IsInvalidArgument, "smaller than parent")
		unchanged(t, s, before)
	})
}

func TestMaxSize(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	size := func(key string) int64 {
		info, err := volume.Inspect(ctx, s.image(idOf(t, s, key)))
		if err != nil {
			t.Fatal(err)
		}
		return info.Size
	}
	label := func(n int64) snapshots.Opt {
		return snapshots.WithLabels(map[string]string{snapshots.LabelSnapshotMaxSize: strconv.FormatInt(n, 10)})
	}
	if _, err := s.Prepare(ctx, "default", ""); err != nil {
		t.Fatal(err)
	}
	if got := size("default"); got != testSize {
		t.Errorf("default size %d, want %d", got, testSize)
	}
	// Rounded down to the block size.
	if _, err := s.Prepare(ctx, "labelled", "", label(48<<20+100)); err != nil {
		t.Fatal(err)
	}
	if got := size("labelled"); got != 48<<20 {
		t.Errorf("labelled size %d, want %d", got, 48<<20)
	}
	// A child asking for more room than its parent is grown.
	if err := s.Commit(ctx, "small", "labelled"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prepare(ctx, "grown", "small", label(96<<20)); err != nil {
		t.Fatal(err)
	}
	if got := size("grown"); got != 96<<20 {
		t.Errorf("grown size %d, want %d", got, 96<<20)
	}
	checkConsistent(t, s)
}

// TestDamagedImages: a missing, corrupt or truncated image gives a
// DataLoss error naming the snapshot, leaves the metadata alone, and the
// snapshot can still be removed.
func TestDamagedImages(t *testing.T) {
	damage := map[string]func(p string) error{
		"missing": os.Remove,
		"corrupt": func(p string) error {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt(make([]byte, 2048), 0) // zeroes the superblock
			return err
		},
		"truncated": func(p string) error { return os.Truncate(p, 1<<20) },
	}
	want := map[string]string{"missing": "missing", "corrupt": "not an ext4 image", "truncated": "truncated"}
	for name, fn := range damage {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t, t.TempDir())
			committed(t, s, "base", "", nil)
			if _, err := s.Prepare(ctx, "work", "base"); err != nil {
				t.Fatal(err)
			}
			before := keys(t, s)
			for _, k := range []string{"base", "work"} {
				if err := fn(s.image(idOf(t, s, k))); err != nil {
					t.Fatal(err)
				}
			}
			_, err := s.Mounts(ctx, "work")
			expectErr(t, "Mounts", err, errdefs.IsDataLoss, "work", want[name], "remove the snapshot")
			expectErr(t, "Commit", s.Commit(ctx, "w", "work"), errdefs.IsDataLoss, "work", want[name])
			_, err = s.Prepare(ctx, "c", "base")
			expectErr(t, "Prepare", err, errdefs.IsDataLoss, "base", want[name])
			_, err = s.View(ctx, "v", "base")
			expectErr(t, "View", err, errdefs.IsDataLoss, "base", want[name])
			if name == "missing" {
				_, err = s.Usage(ctx, "work")
				expectErr(t, "Usage", err, errdefs.IsDataLoss, "work", "missing")
			}
			if got := keys(t, s); strings.Join(got, ",") != strings.Join(before, ",") {
				t.Errorf("snapshots changed: %v, was %v", got, before)
			}
			if l := stagingFiles(t, s); len(l) > 0 {
				t.Errorf("staging files left: %v", l)
			}
			for _, k := range []string{"work", "base"} {
				if err := s.Remove(ctx, k); err != nil {
					t.Errorf("remove damaged %s: %v", k, err)
				}
			}
			checkConsistent(t, s)
		})
	}
}

// TestDamagedTemplate: a template damaged on disk is remade.
func TestDamagedTemplate(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := open(t, root)
	committed(t, s, "base", "", nil)
	s.Close()
	tmpl := filepath.Join(root, "templates", "empty-"+strconv.Itoa(testSize))
	if err := os.Truncate(tmpl, 4096); err != nil {
		t.Fatal(err)
	}
	s = open(t, root)
	if _, err := s.Prepare(ctx, "fresh", ""); err != nil {
		t.Fatal(err)
	}
	if info, err := volume.Inspect(ctx, tmpl); err != nil || !info.Clean {
		t.Errorf("template not remade: %v %+v", err, info)
	}
	checkConsistent(t, s)
}

// TestCommitDirty: a snapshot mounted read-write cannot be committed; one
// left dirty (not mounted) has its journal replayed and commits clean.
func TestCommitDirty(t *testing.T) {
	ctx := context.Background()
	mnt := newLoopFS(t, "xfs", "2G")
	s := open(t, filepath.Join(mnt, "root"))
	m, err := s.Prepare(ctx, "work", "")
	if err != nil {
		t.Fatal(err)
	}
	dir, unmount := mountAt(t, m)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = s.Commit(ctx, "c", "work")
	expectErr(t, "Commit while mounted", err, errdefs.IsFailedPrecondition, "still mounted", "/dev/loop")
	unmount()

	p := s.image(idOf(t, s, "work"))
	if _, err := debugfs(ctx, "-w", "-R", "feature needs_recovery", p); err != nil {
		t.Fatal(err)
	}
	if info, err := volume.Inspect(ctx, p); err != nil || info.Clean {
		t.Fatalf("could not make the image dirty: %v %+v", err, info)
	}
	if err := s.Commit(ctx, "c", "work"); err != nil {
		t.Fatal(err)
	}
	checkConsistent(t, s) // committed images must be clean
	m, err = s.View(ctx, "v", "c")
	if err != nil {
		t.Fatal(err)
	}
	dir, _ = mountAt(t, m)
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "data" {
		t.Errorf("view of c: %q, %v", b, err)
	}
}

// TestDiskFull: Prepare on a full host filesystem (a sparse copy that
// runs out of room) fails with ResourceExhausted, leaves no partial
// clone and no metadata, and works once there is room again.
func TestDiskFull(t *testing.T) {
	ctx := context.Background()
	mnt := newLoopFS(t, "ext4", "256M")
	s := open(t, filepath.Join(mnt, "root"))
	committed(t, s, "base", "", func(dir string) {
		if err := os.WriteFile(filepath.Join(dir, "blob"), randomBytes(t, 24<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	before := keys(t, s)
	filler := filepath.Join(mnt, "filler")
	fillDisk(t, filler, 8<<20) // less than one more copy of base
	_, err := s.Prepare(ctx, "c", "base")
	expectErr(t, "Prepare on a full disk", err, errdefs.IsResourceExhausted, "c", "no space left")
	unchanged(t, s, before)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prepare(ctx, "c", "base"); err != nil {
		t.Fatal(err)
	}
	checkConsistent(t, s)
}

// fillDisk allocates a file that leaves about free bytes free on its
// filesystem.
func fillDisk(t *testing.T, path string, free int64) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &st); err != nil {
		t.Fatal(err)
	}
	avail := int64(st.Bavail) * st.Bsize
	if avail <= free {
		t.Fatalf("only %d bytes free", avail)
	}
	sh(t, "fallocate", "-l", strconv.FormatInt(avail-free, 10), path)
}

// randomBytes returns n incompressible bytes.
func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRootInUse: a second snapshotter on the same root is refused (and
// the first keeps working); once the first closes, the root is free.
func TestRootInUse(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s := open(t, root)
	_, err := New(ctx, root, Config{DefaultSize: testSize})
	expectErr(t, "second New", err, errdefs.IsUnavailable, root, "in use by another process")
	if _, err := s.Prepare(ctx, "a", ""); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2 := open(t, root)
	if _, err := s2.Mounts(ctx, "a"); err != nil {
		t.Fatal(err)
	}
}
