package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/core/snapshots/storage"
	"golang.org/x/sys/unix"
)

// Usage returns the disk space a snapshot takes beyond what it shares:
// for an active snapshot or view it is measured now, for a committed one
// it is the value measured at Commit. See the package documentation.
func (s *Snapshotter) Usage(ctx context.Context, key string) (snapshots.Usage, error) {
	var (
		id    string
		info  snapshots.Info
		usage snapshots.Usage
	)
	err := s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		var err error
		id, info, usage, err = storage.GetInfo(ctx, key)
		return err
	})
	if err != nil {
		return snapshots.Usage{}, fmt.Errorf("usage %s: %w", key, err)
	}
	if info.Kind == snapshots.KindCommitted {
		return usage, nil
	}
	p := s.image(id)
	u, err := imageUsage(p)
	if err != nil {
		return snapshots.Usage{}, fmt.Errorf("usage %s: %w", key, imageError(key, p, err))
	}
	return u, nil
}

// imageUsage measures the image at p: bytes allocated to it and not
// shared with another file, and one inode.
func imageUsage(p string) (snapshots.Usage, error) {
	f, err := os.Open(p)
	if err != nil {
		return snapshots.Usage{}, err
	}
	defer f.Close()
	n, err := exclusiveBytes(f)
	if err != nil {
		return snapshots.Usage{}, err
	}
	return snapshots.Usage{Size: n, Inodes: 1}, nil
}

// FIEMAP, from linux/fiemap.h and linux/fs.h.
const (
	fsIocFiemap        = 0xC020660B
	fiemapFlagSync     = 0x1
	fiemapExtentLast   = 0x1
	fiemapExtentShared = 0x2000
	fiemapBatch        = 256
)

type fiemapHeader struct {
	start, length                     uint64
	flags, mappedExtents, extentCount uint32
	reserved                          uint32
}

type fiemapExtent struct {
	logical, physical, length uint64
	reserved64                [2]uint64
	flags                     uint32
	reserved                  [3]uint32
}

// fiemapRequest is one FS_IOC_FIEMAP argument: a header followed by room
// for fiemapBatch extents.
type fiemapRequest struct {
	hdr     fiemapHeader
	extents [fiemapBatch]fiemapExtent
}

// exclusiveBytes sums the extents of f that FIEMAP does not flag as
// shared (after flushing delayed allocation). Where FIEMAP is not
// supported it falls back to the allocated size, st_blocks × 512.
func exclusiveBytes(f *os.File) (int64, error) {
	var total int64
	var req fiemapRequest
	var start uint64
	for {
		req.hdr = fiemapHeader{start: start, length: ^uint64(0) - start, flags: fiemapFlagSync, extentCount: fiemapBatch}
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&req)))
		if errno != 0 {
			if errors.Is(errno, unix.EOPNOTSUPP) || errors.Is(errno, unix.ENOTTY) {
				return allocatedBytes(f)
			}
			return 0, fmt.Errorf("fiemap %s: %w", f.Name(), errno)
		}
		n := int(req.hdr.mappedExtents)
		if n == 0 {
			return total, nil
		}
		for _, e := range req.extents[:n] {
			if e.flags&fiemapExtentShared == 0 {
				total += int64(e.length)
			}
			if e.flags&fiemapExtentLast != 0 {
				return total, nil
			}
		}
		last := req.extents[n-1]
		start = last.logical + last.length
	}
}

// allocatedBytes is st_blocks × 512.
func allocatedBytes(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Blocks * 512, nil
	}
	return st.Size(), nil
}
