package checkpoint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// dedupeBlock is the unit Dedupe shares: a page, gVisor's unit of saved
// memory (its pages file holds committed pages back to back).
const dedupeBlock = 4096

// dedupeMax is the most one FIDEDUPERANGE call is asked to share (Linux
// caps a call at 16 MiB on XFS, less on some kernels: the rest is asked
// again).
const dedupeMax = 16 << 20

// dedupeRangeDiffers is FIDEDUPERANGE's status for data that differs
// (linux/fs.h FILE_DEDUPE_RANGE_DIFFERS).
const dedupeRangeDiffers = 1

// DedupeStats is what Dedupe did.
type DedupeStats struct {
	// Blocks is how many of the child's blocks the parent holds too, and
	// Shared how many bytes now share the parent's storage.
	Blocks int
	Shared int64
	// Size is the child's size.
	Size int64
}

// ErrNoDedupe means the filesystem cannot share blocks between files
// (FIDEDUPERANGE: XFS with reflink, btrfs).
var ErrNoDedupe = errors.New("the filesystem cannot share blocks between files")

// Dedupe makes file child share its storage with file parent wherever
// they hold the same data, block by block (a page: gVisor's pages file
// holds a sandbox's memory a page at a time, so a checkpoint's pages
// differ from its parent's by the pages written in between, at whatever
// offsets): each child block whose content the parent has anywhere is
// deduplicated onto it (FIDEDUPERANGE: the kernel compares the data and
// shares only what is equal, so a collision of the hashes costs
// nothing). Runs of consecutive blocks go in one call. Readers of either
// file see the same bytes throughout. Both must be on one XFS (reflink)
// or btrfs filesystem; otherwise ErrNoDedupe.
func Dedupe(ctx context.Context, child, parent string) (DedupeStats, error) {
	var st DedupeStats
	src, err := os.Open(parent)
	if err != nil {
		return st, err
	}
	defer src.Close()
	dst, err := os.OpenFile(child, os.O_RDWR, 0)
	if err != nil {
		return st, err
	}
	defer dst.Close()
	// Whether the filesystem can at all, before reading anything: one
	// block asked (equal or not, a filesystem that can answers).
	if fi, err := dst.Stat(); err != nil || fi.Size() < dedupeBlock {
		return st, err
	}
	if _, err := dedupeRange(src, dst, 0, 0, dedupeBlock); err != nil {
		return st, err
	}
	seed := maphash.MakeSeed()
	index, err := blockIndex(src, seed)
	if err != nil {
		return st, fmt.Errorf("dedupe %s: %w", child, err)
	}
	// Runs: a child block at c whose content is at p in the parent
	// extends the current run when both follow it.
	var run struct{ c, p, n int64 }
	flush := func() error {
		if run.n == 0 {
			return nil
		}
		shared, err := dedupeRange(src, dst, run.p, run.c, run.n)
		st.Shared += shared
		run.n = 0
		return err
	}
	st.Size, err = eachBlock(dst, func(off int64, block []byte) error {
		if off%(64<<20) == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		p, ok := index[maphash.Bytes(seed, block)]
		if !ok {
			return flush()
		}
		st.Blocks++
		if run.n > 0 && run.c+run.n == off && run.p+run.n == p {
			run.n += dedupeBlock
			return nil
		}
		if err := flush(); err != nil {
			return err
		}
		run.c, run.p, run.n = off, p, dedupeBlock
		return nil
	})
	if err != nil {
		return st, err
	}
	return st, flush()
}

// blockIndex maps the hash of each whole block of f to its first offset.
func blockIndex(f *os.File, seed maphash.Seed) (map[uint64]int64, error) {
	index := map[uint64]int64{}
	_, err := eachBlock(f, func(off int64, block []byte) error {
		h := maphash.Bytes(seed, block)
		if _, ok := index[h]; !ok {
			index[h] = off
		}
		return nil
	})
	return index, err
}

// eachBlock calls fn with each whole block of f, from its current
// offset, and the block's offset, and returns f's size (a last partial
// block counted, not passed); it stops at fn's first error.
func eachBlock(f *os.File, fn func(off int64, block []byte) error) (int64, error) {
	r := bufio.NewReaderSize(f, 1<<20)
	buf := make([]byte, dedupeBlock)
	for off := int64(0); ; off += dedupeBlock {
		n, err := io.ReadFull(r, buf)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return off + int64(n), nil
		}
		if err != nil {
			return off, fmt.Errorf("read %s: %w", f.Name(), err)
		}
		if err := fn(off, buf); err != nil {
			return off, err
		}
	}
}

// dedupeRange shares n bytes of dst at dstOff with src at srcOff, a call
// at a time, and returns how many bytes the kernel found equal and
// shared.
func dedupeRange(src, dst *os.File, srcOff, dstOff, n int64) (int64, error) {
	var shared int64
	for n > 0 {
		l := min(n, dedupeMax)
		r := unix.FileDedupeRange{Src_offset: uint64(srcOff), Src_length: uint64(l),
			Info: []unix.FileDedupeRangeInfo{{Dest_fd: int64(dst.Fd()), Dest_offset: uint64(dstOff)}}}
		if err := unix.IoctlFileDedupeRange(int(src.Fd()), &r); err != nil {
			if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EXDEV) {
				return shared, fmt.Errorf("dedupe %s onto %s: %w (%v)", dst.Name(), src.Name(), ErrNoDedupe, err)
			}
			return shared, fmt.Errorf("dedupe %s onto %s: %w", dst.Name(), src.Name(), err)
		}
		info := r.Info[0]
		if info.Status < 0 {
			return shared, fmt.Errorf("dedupe %s onto %s: %w", dst.Name(), src.Name(), unix.Errno(-info.Status))
		}
		done := int64(info.Bytes_deduped)
		if info.Status == dedupeRangeDiffers || done == 0 {
			// Not equal (a collision of the hashes): nothing to share.
			done = l
		} else {
			shared += done
		}
		srcOff, dstOff, n = srcOff+done, dstOff+done, n-done
	}
	return shared, nil
}
