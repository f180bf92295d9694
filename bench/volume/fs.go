package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/volume"
)

// hostFS is a loop-mounted filesystem made for the benchmark: the "host"
// filesystem that holds the golden images and their clones.
type hostFS struct {
	typ     string // "xfs" or "ext4"
	backing string // sparse file on the scratch filesystem
	mnt     string
	size    int64
	mkfs    []string // the mkfs command line, for the report
	dio     bool     // the loop device does direct I/O
}

// lookTool finds a program in PATH or in the sbin directories, which a
// non-login root PATH may lack.
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH, /usr/sbin or /sbin (apt-get install xfsprogs e2fsprogs coreutils mount)", name)
}

// sh runs a program to completion and returns its combined output; the
// error carries the command line and the output.
func sh(ctx context.Context, name string, args ...string) (string, error) {
	p, err := lookTool(name)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, p, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// mountLoop loop-mounts img on dir. mount(8) sets up the loop device with
// LO_FLAGS_AUTOCLEAR, so it detaches when the filesystem goes away, even
// when the namespace holding it dies. Not cancellable: a half-done mount
// is worse than a late one.
func mountLoop(img, dir string) error {
	_, err := sh(context.Background(), "mount", "-o", "loop", img, dir)
	return err
}

// unmount unmounts dir and detaches its loop device, then checks that no
// loop device is left on img.
func unmount(dir, img string) error {
	if _, err := sh(context.Background(), "umount", "-d", dir); err != nil {
		return err
	}
	left, err := loopsUnder(img)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("after umount -d %s, loop devices still on %s: %s", dir, img, strings.Join(left, ", "))
	}
	return nil
}

// loopsUnder lists loop devices whose backing file is path or lies under
// it, from /sys/block/loop*/loop/backing_file (what losetup -l shows).
func loopsUnder(path string) ([]string, error) {
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		back := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if back == path || strings.HasPrefix(back, path+"/") {
			dev := filepath.Base(filepath.Dir(filepath.Dir(f)))
			out = append(out, "/dev/"+dev+" ("+back+")")
		}
	}
	return out, nil
}

// newHostFS makes a file of the given size in dir, preallocated (so the
// scratch filesystem's own block allocation does not weigh on whichever
// copy first writes a region), puts a fresh filesystem of type typ on it
// without discarding (which would punch the preallocation out again) and
// mounts it from a loop device with direct I/O: like a filesystem on a
// disk, its data are cached once, not also in the backing file's cache.
func newHostFS(ctx context.Context, dir, typ string, size int64) (*hostFS, error) {
	h := &hostFS{typ: typ, backing: filepath.Join(dir, typ+".fs"), mnt: filepath.Join(dir, typ), size: size}
	f, err := os.OpenFile(h.backing, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s host filesystem: %w", typ, err)
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, size)
	f.Close()
	if err != nil {
		os.Remove(h.backing)
		return nil, fmt.Errorf("%s host filesystem: fallocate %s: %w", typ, volume.FormatSize(size), err)
	}
	switch typ {
	case "xfs":
		// mkfs.xfs enables reflink by default (xfsprogs ≥ 5.1); -K: no
		// discard.
		h.mkfs = []string{"mkfs.xfs", "-q", "-K", h.backing}
	case "ext4":
		// lazy_itable_init=0: no background ext4lazyinit thread zeroing
		// inode tables during the measurements.
		h.mkfs = []string{"mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,nodiscard", h.backing}
	default:
		return nil, fmt.Errorf("unknown filesystem type %q", typ)
	}
	if _, err := sh(ctx, h.mkfs[0], h.mkfs[1:]...); err != nil {
		os.Remove(h.backing)
		return nil, err
	}
	if err := os.Mkdir(h.mnt, 0o755); err != nil {
		os.Remove(h.backing)
		return nil, fmt.Errorf("%s host filesystem: %w", typ, err)
	}
	if err := h.mount(ctx); err != nil {
		os.Remove(h.backing)
		os.Remove(h.mnt)
		return nil, err
	}
	return h, nil
}

// mount attaches the backing file to an auto-clearing direct-I/O loop
// device and mounts it.
func (h *hostFS) mount(ctx context.Context) error {
	dev, d, err := attachLoop(h.backing, true)
	if err != nil {
		return err
	}
	defer d.Close() // the mount holds the device from then on
	if b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "dio")); err == nil {
		h.dio = strings.TrimSpace(string(b)) == "1"
	}
	_, err = sh(ctx, "mount", "-t", h.typ, dev, h.mnt)
	return err
}

// remount unmounts and mounts the filesystem again: it evicts every
// cached inode, so space held only in memory (XFS copy-on-write staging
// extents, inodes awaiting inactivation) is settled.
func (h *hostFS) remount(ctx context.Context) error {
	if err := unmount(h.mnt, h.backing); err != nil {
		return fmt.Errorf("remount %s: %w", h.typ, err)
	}
	if err := h.mount(ctx); err != nil {
		return fmt.Errorf("remount %s: %w", h.typ, err)
	}
	return nil
}

// close unmounts the filesystem, detaches its loop device and removes its
// backing file and mount point.
func (h *hostFS) close() error {
	if err := unmount(h.mnt, h.backing); err != nil {
		return fmt.Errorf("tear down %s host filesystem: %w", h.typ, err)
	}
	if err := os.Remove(h.mnt); err != nil {
		return fmt.Errorf("tear down %s host filesystem: %w", h.typ, err)
	}
	if err := os.Remove(h.backing); err != nil {
		return fmt.Errorf("tear down %s host filesystem: %w", h.typ, err)
	}
	return nil
}

// used returns the bytes in use on the filesystem holding path, after
// flushing it (syncfs) so delayed allocation and deferred frees are done.
func used(path string) (int64, error) {
	if err := syncFS(path); err != nil {
		return 0, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, nil
}

// syncFS flushes the whole filesystem holding path.
func syncFS(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("syncfs: %w", err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", path, err)
	}
	return nil
}

// allocated returns the bytes allocated to a file (st_blocks; extents
// shared by reflink count in every file that shares them).
func allocated(path string) (int64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return st.Blocks * 512, nil
}

// available returns the bytes available to root on the filesystem holding
// path.
func available(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return int64(st.Bfree) * st.Bsize, nil
}

// hostFSSize is the size of each loop filesystem: room for the golden
// images (empty and 50 % filled, every size), the largest full copy, the
// clones of the space test, plus filesystem overhead. The filesystems are
// made one at a time and preallocated, so this is what the benchmark
// takes from the scratch filesystem.
func hostFSSize(cfg config) int64 {
	var need, largest int64
	for _, s := range cfg.sizes {
		need += s/2 + s/32 + 64<<20 // filled golden: data, ext4 metadata, slack
		need += s/512 + 8<<20       // empty golden
		largest = max(largest, s)
	}
	need += largest // one full (non-sparse) copy at a time
	perClone := cfg.writeMiB<<20 + cfg.cloneSize/1024 + 8<<20
	need += int64(cfg.clones) * perClone
	need += need/16 + 2<<30
	const gib = 1 << 30
	return (need + gib - 1) / gib * gib
}

// checkSpace refuses to start when the scratch filesystem cannot hold one
// loop filesystem filled to the brim, plus a margin for everyone else.
func checkSpace(cfg config) error {
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return fmt.Errorf("-dir: %w", err)
	}
	avail, err := available(cfg.dir)
	if err != nil {
		return err
	}
	need := hostFSSize(cfg)
	const margin = 4 << 30
	if avail < need+margin {
		return fmt.Errorf("not enough space in %s: %s available, the benchmark takes %s (one preallocated loop filesystem at a time) and leaves %s for others; "+
			"scale down with -sizes (e.g. -sizes 1G,4G) and/or -clones, or point -dir elsewhere",
			cfg.dir, volume.FormatSize(avail), volume.FormatSize(need), volume.FormatSize(margin))
	}
	return nil
}

// settle waits until the filesystem holding path uses at most target
// bytes (plus 64 KiB of slack), or until its usage stops changing for two
// seconds, and returns the bytes used. XFS frees a deleted file's blocks
// in the background (inode inactivation): syncfs does not wait for that,
// statfs only nudges it along, and without waiting the next measurement
// would net the old file's release against the new copy.
func settle(path string, target int64) (int64, error) {
	const slack = 64 << 10
	start := time.Now()
	last, lastChange := int64(-1), time.Now()
	for {
		u, err := used(path)
		if err != nil {
			return 0, err
		}
		if u <= target+slack {
			return u, nil
		}
		if u != last {
			last, lastChange = u, time.Now()
		}
		if time.Since(lastChange) > 2*time.Second || time.Since(start) > time.Minute {
			progress("note: %s still uses %s more than before after %s", path, volume.FormatSize(u-target),
				fmtDur(time.Since(start).Truncate(time.Millisecond)))
			return u, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// attachLoop attaches img to a free loop device with LO_FLAGS_AUTOCLEAR
// (plus LO_FLAGS_DIRECT_IO if directIO) and returns the device's path and
// an open file on it. The device detaches by itself once the returned
// file is closed and nothing (no mount) uses it any more, so it cannot
// leak, whatever happens.
func attachLoop(img string, directIO bool) (string, *os.File, error) {
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return "", nil, fmt.Errorf("loop device for %s: %w", img, err)
	}
	defer f.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return "", nil, fmt.Errorf("loop device for %s: %w", img, err)
	}
	defer ctl.Close()
	for try := 0; ; try++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", nil, fmt.Errorf("loop device for %s: LOOP_CTL_GET_FREE: %w", img, err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		d, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return "", nil, fmt.Errorf("loop device for %s: %w", img, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		if directIO {
			cfg.Info.Flags |= unix.LO_FLAGS_DIRECT_IO
		}
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], img)
		err = unix.IoctlLoopConfigure(int(d.Fd()), &cfg)
		if err == nil {
			return dev, d, nil
		}
		d.Close()
		if !errors.Is(err, unix.EBUSY) || try >= 20 {
			return "", nil, fmt.Errorf("loop device for %s: LOOP_CONFIGURE %s: %w", img, dev, err)
		}
		// Another process took the free device first; ask again.
	}
}

// devWritten returns the bytes written so far to a block device
// (/sys/block/NAME/stat, field 7: sectors written). The counters live as
// long as the device, across attachments: use differences.
func devWritten(dev string) (int64, error) {
	name := filepath.Base(dev)
	b, err := os.ReadFile(filepath.Join("/sys/block", name, "stat"))
	if err != nil {
		return 0, fmt.Errorf("device stats: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) < 7 {
		return 0, fmt.Errorf("device stats of %s: %q", name, b)
	}
	sectors, err := strconv.ParseInt(f[6], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("device stats of %s: %w", name, err)
	}
	return sectors * 512, nil
}
