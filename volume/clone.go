package volume

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/internal/flock"
)

// Method is how Clone copied an image.
type Method string

// Clone methods, fastest first.
const (
	// MethodReflink shares all extents with the source (FICLONE): O(1)
	// time and no space until either side is written.
	MethodReflink Method = "reflink"
	// MethodCopyFileRange copies the source's data regions in the kernel,
	// leaving holes as holes.
	MethodCopyFileRange Method = "copy_file_range (sparse)"
	// MethodReadWrite copies data regions through user space, used when
	// copy_file_range is refused (e.g. across filesystems); all-zero
	// pieces stay holes.
	MethodReadWrite Method = "read/write (sparse)"
)

// CloneOptions tune Clone.
type CloneOptions struct {
	// Force clones a source whose superblock is not clean or that is
	// locked by a lease. The clone is then at best crash-consistent: run
	// e2fsck -fp on it before use. A source that is not ext4 or is
	// truncated is refused even with Force.
	Force bool
	// Held says the caller holds the source's lease and has frozen the
	// filesystem on it (a checkpoint of the sandbox using it): the source
	// is copied although it is leased, and must be clean, as a frozen
	// ext4 filesystem is.
	Held bool
	// Progress, if set, is called from Clone's goroutine as the copy
	// advances, with bytes done (holes count as done) out of the total;
	// a reflink reports once, at the end.
	Progress func(done, total int64)
}

// Clone copies the image src to the new file dst and returns how. It
// tries FICLONE first and otherwise copies sparsely: only the source's
// data regions (SEEK_DATA/SEEK_HOLE), with copy_file_range or, where the
// kernel refuses that, read/write.
//
// dst must not exist (it is created with O_EXCL; nothing is overwritten,
// ErrExists otherwise) and is locked exclusively until complete, then
// fsynced with its directory. On any failure, including ctx ending, the
// partial dst is removed. The source is locked shared (LOCK_SH) while
// copying: clones of one golden image can run concurrently, but not
// while a lease holds it, and no lease can take it meanwhile. Unless
// opts.Force, the source must be a clean ext4 image (see Inspect).
func Clone(ctx context.Context, src, dst string, opts CloneOptions) (Method, error) {
	start := time.Now()
	sf, err := openImage(src, os.O_RDONLY)
	if err != nil {
		return "", fmt.Errorf("clone %s: %w", src, err)
	}
	defer flock.Close(sf)
	if err := lockFile(sf, src, unix.LOCK_SH); err != nil {
		switch {
		case opts.Held:
		case opts.Force:
			log.G(ctx).WithError(err).Warn("clone: forced, copying a volume in use")
		default:
			return "", withOp("clone", err)
		}
	}
	info, _, err := inspectFile(sf, src)
	if err != nil {
		return "", withOp("clone", err)
	}
	srcState, srcErr := stateOf(sf)
	srcMarked := srcErr == nil && marked(sf, src)
	if !info.Clean && !opts.Force {
		return "", withOp("clone", notClean(src, info,
			"unmount it, repair it with `e2fsck -fp "+src+"`, or clone with --force and repair the clone"))
	}
	abs, err := filepath.Abs(dst)
	if err != nil {
		return "", fmt.Errorf("clone %s to %s: %w", src, dst, err)
	}
	df, err := createExclusive(abs, dst, "clone")
	if err != nil {
		return "", err
	}
	ok := false
	defer func() {
		flock.Close(df)
		if !ok {
			os.Remove(abs)
		}
	}()
	method, err := cloneFile(ctx, sf, df, info.FileSize, opts.Progress)
	if err != nil {
		return "", fmt.Errorf("clone %s to %s: %w", src, dst, err)
	}
	if err := syncFileAndDir(df, abs); err != nil {
		return "", fmt.Errorf("clone %s to %s: %w", src, dst, err)
	}
	if _, _, err := inspectFile(df, dst); err != nil {
		return "", fmt.Errorf("clone %s to %s: the copy does not verify: %w", src, dst, err)
	}
	// A copy of a verified source, unchanged while it was copied, is
	// verified too.
	if now, err := stateOf(sf); srcMarked && err == nil && now == srcState {
		if ds, err := stateOf(df); err == nil {
			mark(ctx, df, dst, ds)
		}
	}
	ok = true
	log.G(ctx).WithField("src", src).WithField("dst", dst).WithField("method", method).
		WithField("duration", time.Since(start)).Debug("volume cloned")
	return method, nil
}

// cloneFile reflinks src into dst or copies it sparsely.
func cloneFile(ctx context.Context, src, dst *os.File, size int64, progress func(done, total int64)) (Method, error) {
	err := ficlone(int(dst.Fd()), int(src.Fd()))
	if err == nil {
		if progress != nil {
			progress(size, size)
		}
		return MethodReflink, nil
	}
	if !unsupported(err) {
		return "", fmt.Errorf("reflink: %w", err)
	}
	log.G(ctx).WithError(err).Debug("clone: no reflink here, copying sparsely")
	if err := dst.Truncate(0); err != nil {
		return "", err
	}
	c := &sparseCopier{src: src, dst: dst, size: size, progress: progress}
	return c.copy(ctx)
}
