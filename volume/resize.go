package volume

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/internal/flock"
)

// Resize changes the filesystem in the image at path to newSize bytes (a
// multiple of its block size, at least MinSize) and returns the result.
// The image must be clean and not in use; it is locked throughout.
//
// Growing is done in place: extend the file (sparsely), e2fsck -fp (which
// resize2fs requires), resize2fs. If resize2fs fails the file is cut back
// to its old length. Shrinking makes resize2fs move blocks, which is not
// crash safe, so it works on a clone instead (a reflink where possible):
// e2fsck -fp, resize2fs, truncate, fsync, then rename it over the image.
// The original is never modified, and when the data does not fit,
// resize2fs refuses and nothing changes.
func Resize(ctx context.Context, path string, newSize int64) (Info, error) {
	f, err := lockPath(path, os.O_RDWR, unix.LOCK_EX)
	if err != nil {
		return Info{}, wrap("resize", path, err)
	}
	defer flock.Close(f)
	if err := checkNotAttached(f, path); err != nil {
		return Info{}, wrap("resize", path, err)
	}
	info, _, err := inspectFile(f, path)
	if err != nil {
		return Info{}, wrap("resize", path, err)
	}
	switch {
	case newSize < MinSize:
		return Info{}, fmt.Errorf("resize %s: size %d is below the minimum %s", path, newSize, FormatSize(MinSize))
	case newSize%info.BlockSize != 0:
		return Info{}, fmt.Errorf("resize %s: size %d is not a multiple of the %d-byte block size; use a K, M, G or T size such as 8G", path, newSize, info.BlockSize)
	case !info.Clean:
		return Info{}, wrap("resize", path, notClean(path, info,
			"unmount it and repair it with `e2fsck -fp "+path+"` first"))
	case newSize == info.Size:
		return info, nil
	case newSize > info.Size:
		err = grow(ctx, f, path, info, newSize)
	default:
		var nf *os.File
		if nf, err = shrink(ctx, f, path, info, newSize); err == nil {
			defer flock.Close(nf)
			f = nf
		}
	}
	if err != nil {
		return Info{}, wrap("resize", path, err)
	}
	info, _, err = inspectFile(f, path)
	if err != nil {
		return Info{}, wrap("resize", path, err)
	}
	log.G(ctx).WithField("volume", path).WithField("size", newSize).Debug("volume resized")
	return info, nil
}

// grow resizes f's filesystem in place.
func grow(ctx context.Context, f *os.File, path string, info Info, newSize int64) error {
	if info.FileSize < newSize {
		if err := f.Truncate(newSize); err != nil {
			return fmt.Errorf("extend file: %w", err)
		}
	}
	err := resizeFS(ctx, path, newSize)
	if err != nil && info.FileSize < newSize {
		if terr := f.Truncate(info.FileSize); terr != nil {
			return fmt.Errorf("%w (and restoring the old length failed: %v)", err, terr)
		}
	}
	if err != nil {
		return err
	}
	return f.Sync()
}

// shrink resizes a clone of f and renames it over path. It returns the
// file now at path, locked.
func shrink(ctx context.Context, f *os.File, path string, info Info, newSize int64) (*os.File, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	tmpPath := fmt.Sprintf("%s.shrink-%d", abs, os.Getpid())
	tmp, err := createExclusive(tmpPath, tmpPath, "shrink")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			flock.Close(tmp)
			os.Remove(tmpPath)
		}
	}()
	if st, err := f.Stat(); err == nil {
		if sys, isUnix := st.Sys().(*syscall.Stat_t); isUnix {
			// Best effort: keep the image's owner and mode.
			_ = tmp.Chown(int(sys.Uid), int(sys.Gid))
		}
		_ = tmp.Chmod(st.Mode().Perm())
	}
	if _, err := cloneFile(ctx, f, tmp, info.FileSize, nil); err != nil {
		return nil, fmt.Errorf("copy for shrinking: %w", err)
	}
	if err := resizeFS(ctx, tmpPath, newSize); err != nil {
		return nil, err
	}
	if err := tmp.Truncate(newSize); err != nil {
		return nil, fmt.Errorf("cut file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return nil, fmt.Errorf("fsync: %w", err)
	}
	if _, _, err := inspectFile(tmp, tmpPath); err != nil {
		return nil, fmt.Errorf("shrunk copy does not verify: %w", err)
	}
	if err := os.Rename(tmpPath, abs); err != nil {
		return nil, err
	}
	ok = true
	if err := syncFileAndDir(tmp, abs); err != nil {
		log.G(ctx).WithError(err).Warn("resize: fsync after rename")
	}
	return tmp, nil
}

// resizeFS runs e2fsck -fp and resize2fs on the image at path.
func resizeFS(ctx context.Context, path string, newSize int64) error {
	if err := fsckFix(ctx, path); err != nil {
		return err
	}
	res, err := run(ctx, "resize2fs", path, strconv.FormatInt(newSize/1024, 10)+"K")
	if err != nil {
		return err
	}
	if res.exitCode != 0 {
		return fmt.Errorf("resize2fs exit %d: %s", res.exitCode, summary(res.output, 2))
	}
	return nil
}
