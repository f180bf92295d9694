package volume

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReleaseWithCopiesHeld: Release frees the image even while another
// process holds a copy of the lease's descriptor, as every process forked
// between the lease's open and its release does until it execs (the
// snapshotter's and the shim's goroutines start tools all the time).
func TestReleaseWithCopiesHeld(t *testing.T) {
	ctx := context.Background()
	img := mkImage(t, 64<<20)
	l, err := Acquire(ctx, img, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A child that keeps the copy for good stands in for one caught
	// between fork and exec.
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{l.File()}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		child.Process.Kill()
		child.Wait()
	}()
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(ctx, img, AcquireOptions{})
	if err != nil {
		t.Fatalf("acquire after release while a child holds a copy of the descriptor: %v", err)
	}
	if err := l2.Release(); err != nil {
		t.Fatal(err)
	}
	if err := Remove(ctx, img); err != nil {
		t.Fatalf("remove after release: %v", err)
	}
}

// TestLeaseExclusive: a lease refuses a second one and every operation
// that would disturb the image, and Release makes it available again.
func TestLeaseExclusive(t *testing.T) {
	ctx := context.Background()
	img := mkImage(t, 64<<20)
	before := sha(t, img)
	l, err := Acquire(ctx, img, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Path() != img || !l.Info().Clean || l.File() == nil {
		t.Errorf("lease: %s %+v", l.Path(), l.Info())
	}
	_, err = Acquire(ctx, img, AcquireOptions{})
	assertIs(t, err, ErrInUse, "volume "+img+" is in use by another sandbox (locked by pid "+strconv.Itoa(os.Getpid())+" (")
	_, err = Acquire(ctx, img, AcquireOptions{Force: true})
	assertIs(t, err, ErrInUse) // Force is about the clean state, not the lock
	assertIs(t, Remove(ctx, img), ErrInUse, img)
	_, err = Resize(ctx, img, 128<<20)
	assertIs(t, err, ErrInUse, img)
	assertIs(t, Check(ctx, img), ErrInUse, img)
	dst := filepath.Join(t.TempDir(), "clone.img")
	_, err = Clone(ctx, img, dst, CloneOptions{})
	assertIs(t, err, ErrInUse, img)
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("refused clone left %s", dst)
	}
	if _, err := Clone(ctx, img, dst, CloneOptions{Force: true}); err != nil {
		t.Errorf("forced clone of a leased image: %v", err)
	}
	if sha(t, img) != before {
		t.Fatal("refused operations changed the image")
	}

	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
	l2, err := Acquire(ctx, img, AcquireOptions{})
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	l2.Release()
}

// TestLeaseDiesWithProcess: the lock belongs to an open file, so a
// holder that exits (without releasing) frees the image.
func TestLeaseDiesWithProcess(t *testing.T) {
	ctx := context.Background()
	img := mkImage(t, 64<<20)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(ctx, img, AcquireOptions{})
	assertIs(t, err, ErrInUse)
	f.Close() // what the kernel does when a holder dies
	l, err := Acquire(ctx, img, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
}

// TestCloneSharesSourceLock: clones take the source shared, so they may
// overlap each other but not a lease.
func TestCloneSharesSourceLock(t *testing.T) {
	ctx := context.Background()
	img := mkImage(t, 64<<20)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil { // a clone in progress
		t.Fatal(err)
	}
	if _, err := Clone(ctx, img, filepath.Join(t.TempDir(), "a.img"), CloneOptions{}); err != nil {
		t.Errorf("clone alongside another clone: %v", err)
	}
	_, err = Acquire(ctx, img, AcquireOptions{})
	assertIs(t, err, ErrInUse)
}

// TestDestinationExists: Create and Clone never touch an existing path.
func TestDestinationExists(t *testing.T) {
	ctx := context.Background()
	img := mkImage(t, 64<<20)
	dst := filepath.Join(t.TempDir(), "precious")
	content := []byte("do not lose me")
	if err := os.WriteFile(dst, content, 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Unix(1e9, 0)
	os.Chtimes(dst, old, old)
	_, err := Clone(ctx, img, dst, CloneOptions{})
	assertIs(t, err, ErrExists, dst, "not touched")
	_, err = Create(ctx, dst, CreateOptions{Size: 64 << 20})
	assertIs(t, err, ErrExists, dst)
	got, _ := os.ReadFile(dst)
	st, _ := os.Stat(dst)
	if string(got) != string(content) || !st.ModTime().Equal(old) {
		t.Errorf("existing file changed: %q, mtime %v", got, st.ModTime())
	}
	assertIs(t, Remove(ctx, dst), ErrNotExt4, "rm(1)")
	if _, err := os.Stat(dst); err != nil {
		t.Errorf("Remove deleted a non-image: %v", err)
	}
}

// TestRemove deletes images, damaged ones included.
func TestRemove(t *testing.T) {
	ctx := context.Background()
	img := mkImage(t, 64<<20)
	if err := os.Truncate(img, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := Remove(ctx, img); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(img); !os.IsNotExist(err) {
		t.Errorf("still there: %v", err)
	}
	if err := Remove(ctx, img); !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("removing a missing image: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}
