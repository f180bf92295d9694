package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gvxrun/gvx/volume"
)

// method is one way of copying an image; run copies src to the new file
// dst, durably, and returns a note on how (e.g. the volume.Clone method).
type method struct {
	name string
	// legend explains the method below the tables.
	legend string
	// needsReflink marks a method that fails without reflink: on such a
	// filesystem its first failure is reported as n/a, with the reason.
	needsReflink bool
	// skipNoReflink is the reason the method is left out on a filesystem
	// without reflink.
	skipNoReflink string
	run           func(ctx context.Context, src, dst string) (string, error)
}

// methods are measured in this order; the first is the reference for the
// ratios.
var methods = []method{
	{
		name: "volume.Clone",
		legend: "gvx's library: FICLONE, else SEEK_DATA/SEEK_HOLE walk + copy_file_range; " +
			"fsyncs file and directory, verifies the clone's superblock; [the Method it returned]",
		run: func(ctx context.Context, src, dst string) (string, error) {
			m, err := volume.Clone(ctx, src, dst, volume.CloneOptions{})
			return string(m), err
		},
	},
	{
		name:         "cp --reflink=always",
		legend:       "GNU cp, then fsync(dst); fails without reflink (n/a)",
		needsReflink: true,
		run:          cpWith("--reflink=always"),
	},
	{
		name: "cp",
		legend: "plain GNU cp, then fsync(dst). coreutils ≥ 9.0 defaults to --reflink=auto --sparse=auto: " +
			"it reflinks where it can and otherwise copies sparsely (SEEK_DATA + copy_file_range)",
		run: cpWith(),
	},
	{
		name:          "cp --reflink=never",
		legend:        "GNU cp forced to copy (still sparse-aware), then fsync(dst); XFS only (on ext4 it is plain cp)",
		skipNoReflink: "same as cp without reflink",
		run:           cpWith("--reflink=never"),
	},
	{
		name: "io.Copy+fsync (blockfile)",
		legend: "containerd blockfile's approach: open src, create dst, io.Copy(dst, src), fsync. Go turns io.Copy " +
			"between two *os.File into copy_file_range, which XFS serves as a reflink; on ext4 it is a full, " +
			"non-sparse copy (holes become written zeros)",
		run: ioCopy,
	},
	{
		name: "read/write 1MiB+fsync",
		legend: "plain read/write loop with a 1 MiB buffer, then fsync: the full copy without copy_file_range " +
			"(what io.Copy costs where the kernel cannot help), allocates the whole image",
		run: readWriteCopy,
	},
}

// cpWith returns a method running cp with the given options.
func cpWith(opts ...string) func(ctx context.Context, src, dst string) (string, error) {
	return func(ctx context.Context, src, dst string) (string, error) {
		args := append(append([]string{}, opts...), src, dst)
		if _, err := sh(ctx, "cp", args...); err != nil {
			return "", err
		}
		return "", fsyncPath(dst)
	}
}

// ioCopy is containerd blockfile's copy, written out.
func ioCopy(_ context.Context, src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("io.Copy: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", fmt.Errorf("io.Copy: %w", err)
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		return "", fmt.Errorf("io.Copy %s to %s: %w", src, dst, err)
	}
	if err := out.Sync(); err != nil {
		return "", fmt.Errorf("io.Copy: fsync %s: %w", dst, err)
	}
	return "", out.Close()
}

// readWriteCopy copies src to dst with read(2)/write(2) through a 1 MiB
// buffer (no copy_file_range, no hole detection), then fsyncs.
func readWriteCopy(ctx context.Context, src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("read/write: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", fmt.Errorf("read/write: %w", err)
	}
	defer out.Close()
	buf := make([]byte, 1<<20)
	for {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("read/write %s: %w", dst, err)
		}
		n, rerr := in.Read(buf)
		if n > 0 {
			if _, err := out.Write(buf[:n]); err != nil {
				return "", fmt.Errorf("read/write: write %s: %w", dst, err)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return "", fmt.Errorf("read/write: read %s: %w", src, rerr)
		}
	}
	if err := out.Sync(); err != nil {
		return "", fmt.Errorf("read/write: fsync %s: %w", dst, err)
	}
	return "", out.Close()
}

// fsyncPath fsyncs a file by name.
func fsyncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}
