package volume

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/internal/flock"
)

// Remove deletes the image at path. It refuses, touching nothing, when
// the image is in use (leased, being cloned, or attached to a loop
// device) and when the file lacks the ext4 magic, so that a typo cannot
// delete an unrelated file; truncated or damaged images can be removed.
func Remove(ctx context.Context, path string) error {
	f, err := lockPath(path, os.O_RDONLY, unix.LOCK_EX)
	if err != nil {
		return wrap("remove", path, err)
	}
	defer flock.Close(f)
	if err := checkNotAttached(f, path); err != nil {
		return withOp("remove", err)
	}
	if !hasMagic(f) {
		return &Error{Op: "remove", Path: path, Err: ErrNotExt4,
			Detail: "no ext4 magic at byte 1080", Fix: "not removing it; use rm(1) if you mean it"}
	}
	unmark(f)
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	log.G(ctx).WithField("volume", path).Debug("volume removed")
	return nil
}

// hasMagic reports whether f has the ext4 superblock magic, whatever
// else is wrong with it.
func hasMagic(f *os.File) bool {
	b := make([]byte, 2)
	_, err := f.ReadAt(b, superblockOffset+offMagic)
	return err == nil && binary.LittleEndian.Uint16(b) == ext4Magic
}

// lockPath opens path and flocks it, retrying if the path was replaced
// (e.g. by a shrinking Resize) between open and lock, so that the lock
// is on the file the path names.
func lockPath(path string, flag, how int) (*os.File, error) {
	for range 10 {
		f, err := openImage(path, flag)
		if err != nil {
			return nil, err
		}
		if err := lockFile(f, path, how); err != nil {
			f.Close()
			return nil, err
		}
		fst, err1 := f.Stat()
		pst, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(fst, pst) {
			return f, nil
		}
		flock.Close(f)
		if err2 != nil && !errors.Is(err2, os.ErrNotExist) {
			return nil, err2
		}
	}
	return nil, errors.New("replaced repeatedly while locking it")
}
