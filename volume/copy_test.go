package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// stubCopy replaces the kernel copy paths for one test.
func stubCopy(t *testing.T, clone func(int, int) error, cfr func(int, *int64, int, *int64, int, int) (int, error)) {
	oc, of := ficlone, copyFileRange
	t.Cleanup(func() { ficlone, copyFileRange = oc, of })
	if clone != nil {
		ficlone = clone
	}
	if cfr != nil {
		copyFileRange = cfr
	}
}

func noReflink(int, int) error { return unix.EOPNOTSUPP }

// populated returns a clean 256 MiB image with scattered data written by
// debugfs (no mount needed), so copies have several data regions.
func populated(t *testing.T) string {
	img := mkImage(t, 256<<20)
	src := filepath.Join(t.TempDir(), "payload")
	b := make([]byte, 3<<20)
	for i := range b {
		b[i] = byte(i*7 + i>>12)
	}
	if err := os.WriteFile(src, b, 0o600); err != nil {
		t.Fatal(err)
	}
	sh(t, "debugfs", "-w", "-R", "write "+src+" payload", img)
	return img
}

// TestCloneFallbacks drives the sparse copy through each path the kernel
// may force on it and checks the result is identical and sparse.
func TestCloneFallbacks(t *testing.T) {
	exdev := func(int, *int64, int, *int64, int, int) (int, error) { return 0, unix.EXDEV }
	zero := func(int, *int64, int, *int64, int, int) (int, error) { return 0, nil }
	calls := 0
	flaky := func(rfd int, roff *int64, wfd int, woff *int64, n, fl int) (int, error) {
		if calls++; calls > 2 {
			return 0, unix.EOPNOTSUPP
		}
		return unix.CopyFileRange(rfd, roff, wfd, woff, min(n, 64<<10), fl)
	}
	for _, c := range []struct {
		name string
		cfr  func(int, *int64, int, *int64, int, int) (int, error)
		want Method
	}{
		{"copy_file_range", nil, MethodCopyFileRange},
		{"EXDEV", exdev, MethodReadWrite},
		{"returns 0", zero, MethodReadWrite},
		{"fails midway", flaky, MethodReadWrite},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := populated(t)
			stubCopy(t, noReflink, c.cfr)
			dst := filepath.Join(t.TempDir(), "clone.img")
			var prog progressLog
			m, err := Clone(context.Background(), img, dst, CloneOptions{Progress: prog.record})
			if err != nil {
				t.Fatal(err)
			}
			if m != c.want {
				t.Errorf("method %q, want %q", m, c.want)
			}
			prog.check(t, 256<<20)
			if !sameBytes(t, img, dst) {
				t.Fatal("clone differs")
			}
			if a := allocated(t, dst); a > allocated(t, img)+(1<<20) {
				t.Errorf("clone allocates %s, source %s", FormatSize(a), FormatSize(allocated(t, img)))
			}
			if err := Check(context.Background(), dst); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestCloneFailureRemovesDst: an I/O error or cancellation leaves no
// partial destination behind.
func TestCloneFailureRemovesDst(t *testing.T) {
	img := populated(t)
	dst := filepath.Join(t.TempDir(), "clone.img")

	stubCopy(t, func(int, int) error { return unix.EIO }, nil)
	_, err := Clone(context.Background(), img, dst, CloneOptions{})
	if !errors.Is(err, unix.EIO) {
		t.Errorf("reflink EIO: %v", err)
	}
	assertGone(t, dst)

	stubCopy(t, noReflink, func(int, *int64, int, *int64, int, int) (int, error) { return 0, unix.ENOSPC })
	_, err = Clone(context.Background(), img, dst, CloneOptions{})
	if !errors.Is(err, unix.ENOSPC) {
		t.Errorf("copy ENOSPC: %v", err)
	}
	assertGone(t, dst)

	stubCopy(t, noReflink, unix.CopyFileRange)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = Clone(ctx, img, dst, CloneOptions{Progress: func(done, total int64) { cancel() }})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled clone: %v", err)
	}
	assertGone(t, dst)

	// Not ext4: refused before dst is created.
	garbage := filepath.Join(t.TempDir(), "garbage")
	os.WriteFile(garbage, make([]byte, 1<<20), 0o600)
	_, err = Clone(context.Background(), garbage, dst, CloneOptions{Force: true})
	assertIs(t, err, ErrNotExt4, garbage)
	assertGone(t, dst)
}

func assertGone(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("%s left behind (%v)", p, err)
	}
}

// TestCloneReadWriteHoles: the read/write path turns zero blocks of a
// fully allocated source into holes.
func TestCloneReadWriteHoles(t *testing.T) {
	img := mkImage(t, 64<<20)
	full := filepath.Join(t.TempDir(), "full.img")
	copyFile(t, img, full) // plain write: every block allocated
	if a := allocated(t, full); a < 60<<20 {
		t.Skipf("this filesystem made the plain copy sparse (%d bytes allocated)", a)
	}
	stubCopy(t, noReflink, func(int, *int64, int, *int64, int, int) (int, error) { return 0, unix.ENOSYS })
	dst := filepath.Join(t.TempDir(), "clone.img")
	if m, err := Clone(context.Background(), full, dst, CloneOptions{}); err != nil || m != MethodReadWrite {
		t.Fatalf("%q %v", m, err)
	}
	if !sameBytes(t, full, dst) {
		t.Fatal("differs")
	}
	if a := allocated(t, dst); a > 8<<20 {
		t.Errorf("clone of a zero-filled image allocates %s", FormatSize(a))
	}
}
