package volume

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Test hooks: the copy paths are chosen by what these return.
var (
	ficlone       = unix.IoctlFileClone
	copyFileRange = unix.CopyFileRange
)

const (
	// copyChunk bounds one copy_file_range call, so cancellation and
	// progress are noticed every few tens of milliseconds.
	copyChunk = 32 << 20
	// rwBuffer is the read/write fallback's buffer; zeroPiece is the unit
	// in which all-zero data is skipped (left a hole) instead of written.
	rwBuffer  = 1 << 20
	zeroPiece = 64 << 10
)

// unsupported reports whether err means "this kernel or filesystem cannot
// do that here", as opposed to a real I/O error.
func unsupported(err error) bool {
	for _, e := range []error{unix.EOPNOTSUPP, unix.EXDEV, unix.EINVAL, unix.ENOSYS, unix.ENOTTY} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// sparseCopier copies the data regions of src to the fresh, empty dst at
// the same offsets, leaving holes as holes.
type sparseCopier struct {
	src, dst *os.File
	size     int64
	progress func(done, total int64)
	rw       bool   // copy_file_range gave up; use read/write
	buf      []byte // read/write buffer, allocated on first use
}

// copy walks src with SEEK_DATA/SEEK_HOLE and copies each data region. It
// returns the method used: read/write if any region needed it.
func (c *sparseCopier) copy(ctx context.Context) (Method, error) {
	fd := int(c.src.Fd())
	var off int64
	for off < c.size {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole remains
		}
		hole := c.size
		if err == nil {
			hole, err = unix.Seek(fd, data, unix.SEEK_HOLE)
		}
		if errors.Is(err, unix.EINVAL) { // no SEEK_DATA here: all data
			data, hole, err = off, c.size, nil
		}
		if err != nil {
			return "", fmt.Errorf("find data at offset %d: %w", off, err)
		}
		hole = min(hole, c.size)
		if err := c.region(ctx, data, hole); err != nil {
			return "", err
		}
		off = hole
		c.report(off)
	}
	// The size is set last, so an interrupted copy is shorter than its
	// filesystem and Inspect calls it truncated.
	if err := c.dst.Truncate(c.size); err != nil {
		return "", fmt.Errorf("set size: %w", err)
	}
	c.report(c.size)
	if c.rw {
		return MethodReadWrite, nil
	}
	return MethodCopyFileRange, nil
}

func (c *sparseCopier) report(done int64) {
	if c.progress != nil {
		c.progress(done, c.size)
	}
}

// region copies [pos, end) with copy_file_range, falling back to
// read/write for the rest of the copy once the kernel refuses.
func (c *sparseCopier) region(ctx context.Context, pos, end int64) error {
	for pos < end {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(end-pos, copyChunk)
		var done int64
		var err error
		if c.rw {
			done, err = c.readWrite(pos, n)
		} else {
			roff, woff := pos, pos
			var w int
			w, err = copyFileRange(int(c.src.Fd()), &roff, int(c.dst.Fd()), &woff, int(n), 0)
			done = int64(w)
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case err != nil && unsupported(err), err == nil && w == 0:
				// w == 0 before the end: some filesystems return that
				// instead of an error; read/write will tell EOF apart.
				c.rw = true
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("copy at offset %d: %w", pos, err)
		}
		pos += done
		c.report(pos)
	}
	return nil
}

// readWrite copies up to n bytes at off with pread/pwrite, skipping
// all-zero pieces (dst is fresh, so they read back as zeros anyway).
func (c *sparseCopier) readWrite(off, n int64) (int64, error) {
	if c.buf == nil {
		c.buf = make([]byte, rwBuffer)
	}
	buf := c.buf[:min(n, int64(len(c.buf)))]
	r, err := c.src.ReadAt(buf, off)
	if r == 0 && err != nil {
		return 0, fmt.Errorf("read: %w (the source shrank while copying?)", err)
	}
	buf = buf[:r]
	for p := 0; p < len(buf); p += zeroPiece {
		piece := buf[p:min(p+zeroPiece, len(buf))]
		if allZero(piece) {
			continue
		}
		if _, err := c.dst.WriteAt(piece, off+int64(p)); err != nil {
			return 0, fmt.Errorf("write: %w", err)
		}
	}
	return int64(r), nil
}

func allZero(b []byte) bool {
	for _, v := range b {
		if v != 0 {
			return false
		}
	}
	return true
}
