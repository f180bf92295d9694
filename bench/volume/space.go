package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gvxrun/gvx/volume"
)

// spaceTest clones src cfg.clones times with volume.Clone, writes
// cfg.writeMiB MiB into each clone through a loop mount, and reports the
// host filesystem's space used against the clones' apparent sizes and
// against what each clone's ext4 wrote. perFilledCopy is volume.Clone's
// space per copy of the 50 % golden of the same size, to account for it
// where src is the empty one (no reflink).
func (b *bench) spaceTest(ctx context.Context, h *hostFS, src golden, perFilledCopy int64) error {
	n, write := b.cfg.clones, b.cfg.writeMiB<<20
	dir := filepath.Join(h.mnt, "clones")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	fmt.Printf("\nspace test on %s: %d clones of the %s %s golden (allocated %s) by volume.Clone; each clone loop-mounted,\n"+
		"  a %s file of non-zero data written and fsynced, remounted read-only, unmounted\n",
		h.typ, n, volume.FormatSize(src.size), src.label(), volume.FormatSize(src.alloc), volume.FormatSize(write))
	if !src.filled {
		fmt.Printf("  NOTE: without reflink every clone copies its golden's data, so this uses the EMPTY golden: %d clones of the\n"+
			"  50 %% golden would take %d × %s (volume.Clone's space/copy above) = %s, more than this %s filesystem\n",
			n, n, volume.FormatSize(perFilledCopy), volume.FormatSize(int64(n)*perFilledCopy), volume.FormatSize(h.size))
	}
	before, err := used(h.mnt)
	if err != nil {
		return err
	}
	var cloneT, cycleT []time.Duration
	var written []int64
	methods := map[volume.Method]int{}
	start, last := time.Now(), time.Now()
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		dst := filepath.Join(dir, fmt.Sprintf("clone-%03d.img", i))
		t0 := time.Now()
		m, err := volume.Clone(ctx, src.path, dst, volume.CloneOptions{})
		if err != nil {
			return err
		}
		t1 := time.Now()
		w, err := b.episode(ctx, dst, write, uint64(i+1)<<32)
		if err != nil {
			return fmt.Errorf("clone %d: %w", i, err)
		}
		cloneT = append(cloneT, t1.Sub(t0))
		cycleT = append(cycleT, time.Since(t1))
		written = append(written, w)
		methods[m]++
		if time.Since(last) >= 3*time.Second || i == n-1 {
			last = time.Now()
			u, err := used(h.mnt)
			if err != nil {
				return err
			}
			progress("%s space test: %d/%d clones written in %s, +%s used", h.typ, i+1, n,
				fmtDur(time.Since(start)), volume.FormatSize(u-before))
		}
	}
	after, err := used(h.mnt)
	if err != nil {
		return err
	}
	var apparent, alloc, wrote int64
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, fmt.Sprintf("clone-%03d.img", i))
		info, err := volume.Inspect(ctx, p)
		if err != nil {
			return err
		}
		if !info.Clean {
			return fmt.Errorf("clone %s is not clean after unmount (state %s)", p, info.State)
		}
		apparent += info.FileSize
		alloc += info.Allocated
		wrote += written[i]
	}
	progress("%s space test: remounting the host filesystem to settle cached state", h.typ)
	if err := h.remount(ctx); err != nil {
		return err
	}
	settled, err := used(h.mnt)
	if err != nil {
		return err
	}
	var how []string
	for m, c := range methods {
		how = append(how, fmt.Sprintf("%s ×%d", m, c))
	}
	per := func(total int64) string {
		if n == 0 {
			return "-"
		}
		return volume.FormatSize(total / int64(n))
	}
	fmt.Printf("  clone (%s)          p50 %s, p95/max %s\n", strings.Join(how, ", "), fmtDur(median(cloneT)), fmtDur(p95(cloneT)))
	fmt.Printf("  mount, write %s, fsync, remount ro, unmount: p50 %s, p95/max %s\n",
		volume.FormatSize(write), fmtDur(median(cycleT)), fmtDur(p95(cycleT)))
	fmt.Printf("  written by each clone's ext4 (its loop device's writes, mount to read-only remount): p50 %s, total %s\n",
		volume.FormatSize(median64(written)), volume.FormatSize(wrote))
	fmt.Printf("  host fs used: before %s, after %s: +%s = %s per clone\n",
		volume.FormatSize(before), volume.FormatSize(after), volume.FormatSize(after-before), per(after-before))
	fmt.Printf("  after remounting the host fs:     +%s = %s per clone\n",
		volume.FormatSize(settled-before), per(settled-before))
	fmt.Printf("  sum of apparent sizes: %s; sum of allocated (st_blocks, shared extents counted in every file): %s\n",
		volume.FormatSize(apparent), volume.FormatSize(alloc))

	if h.typ == "xfs" && src.size == b.targetImageSize() {
		b.targetTimes = append(b.targetTimes, cloneT...)
		b.targetFrom = append(b.targetFrom, fmt.Sprintf("%d in the space test", len(cloneT)))
	}
	perClone := (settled - before) / int64(max(n, 1))
	perWrite := wrote / int64(max(n, 1))
	line := fmt.Sprintf("%s, %d clones of the %s %s golden, %s written into each: %s per clone on the host fs "+
		"(each clone's ext4 wrote %s: data + its metadata and journal)", h.typ, n, volume.FormatSize(src.size), src.label(),
		volume.FormatSize(write), volume.FormatSize(perClone), volume.FormatSize(perWrite))
	if src.filled {
		verdict := "MET"
		if perClone > perWrite {
			verdict = fmt.Sprintf("NOT MET (%s per clone beyond what it wrote)", volume.FormatSize(perClone-perWrite))
		}
		line += fmt.Sprintf("; %s of apparent size. Target space = changed blocks only: %s",
			volume.FormatSize(apparent), verdict)
	} else {
		line += fmt.Sprintf("; the golden's %s is duplicated in each (sparse copy)", volume.FormatSize(src.alloc))
	}
	b.summary = append(b.summary, line)

	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove clones: %w", err)
	}
	_, err = settle(h.mnt, before)
	return err
}

// episode plays one episode on a clone: attach it to a loop device, mount
// it, write n bytes of data into a new file, fsync, remount read-only
// (which commits the journal and marks the superblock clean), unmount. It
// returns the bytes written to the image's loop device from before the
// mount to the read-only remount: everything ext4 wrote, so an upper
// bound on the blocks the clone changed.
func (b *bench) episode(ctx context.Context, img string, n int64, seed uint64) (written int64, err error) {
	dev, d, err := attachLoop(img, false)
	if err != nil {
		return 0, err
	}
	base, err := devWritten(dev)
	if err != nil {
		d.Close()
		return 0, err
	}
	_, err = sh(ctx, "mount", "-t", "ext4", dev, b.imgMnt)
	d.Close() // the mount holds the device now; it detaches on unmount
	if err != nil {
		return 0, err
	}
	defer func() {
		if uerr := unmount(b.imgMnt, img); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	if err := writeData(ctx, filepath.Join(b.imgMnt, "episode.bin"), n, seed, ""); err != nil {
		return 0, err
	}
	if _, err := sh(ctx, "mount", "-o", "remount,ro", b.imgMnt); err != nil {
		return 0, err
	}
	after, err := devWritten(dev)
	if err != nil {
		return 0, err
	}
	return after - base, nil
}
