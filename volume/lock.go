package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/internal/flock"
	"github.com/gvxrun/gvx/internal/loopdev"
)

// AcquireOptions tune Acquire.
type AcquireOptions struct {
	// Force accepts an image whose superblock is not clean (the caller
	// is expected to repair it, e.g. with e2fsck -fp, before mounting).
	Force bool
}

// Lease is exclusive use of an image, held by an open file description
// with flock(LOCK_EX). The lock dies with the descriptor: on Release, or
// when the holding process exits, however it exits.
type Lease struct {
	path string
	info Info
	mu   sync.Mutex
	f    *os.File
}

// Acquire locks the image at path for exclusive use, typically by the shim
// for as long as a sandbox has it mounted. It never blocks: when another
// lease, a running Clone of it, Resize, Check or Remove holds the image it
// fails with ErrInUse ("volume X is in use by another sandbox (locked)").
// The image must pass Inspect and, unless opts.Force, be clean; those are
// checked after locking so they cannot change underneath, and so is
// Verify's full check unless the image carries a valid verified mark. An
// image anyone but root may write is refused (checkOwner).
func Acquire(ctx context.Context, path string, opts AcquireOptions) (*Lease, error) {
	f, err := lockPath(path, os.O_RDWR, unix.LOCK_EX)
	if err != nil {
		return nil, wrap("acquire", path, err)
	}
	info, sb, err := inspectFile(f, path)
	if err != nil {
		flock.Close(f)
		return nil, withOp("acquire", err)
	}
	if err := checkOwner(f, path); err != nil {
		flock.Close(f)
		return nil, withOp("acquire", err)
	}
	if !info.Clean && !opts.Force {
		flock.Close(f)
		return nil, withOp("acquire", notClean(path, info,
			"unmount it everywhere, then repair it with `e2fsck -fp "+path+"` (or acquire with force)"))
	}
	if err := verifyFile(ctx, f, path, info, sb, false); err != nil {
		flock.Close(f)
		return nil, withOp("acquire", err)
	}
	log.G(ctx).WithField("volume", path).Debug("volume acquired")
	return &Lease{path: path, info: info, f: f}, nil
}

// Path is the image the lease holds.
func (l *Lease) Path() string { return l.path }

// Info is the image's Inspect result taken right after locking.
func (l *Lease) Info() Info { return l.info }

// File is the locked, read-write image file; it stays valid until
// Release. Handing its descriptor to a child process (or to a loop device
// with LOOP_CONFIGURE) avoids reopening the path.
func (l *Lease) File() *os.File {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f
}

// Release unlocks the image. It is safe to call more than once.
func (l *Lease) Release() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := flock.Close(l.f)
	l.f = nil
	if err != nil {
		return fmt.Errorf("release %s: %w", l.path, err)
	}
	return nil
}

// lockFile takes flock(how|LOCK_NB) on f, mapping contention to ErrInUse.
// A lock that is gone by the time its holders are looked up was a
// passing one (a descriptor copy in a process between fork and exec
// that another program did not unlock): it is tried again, a few times.
func lockFile(f *os.File, path string, how int) error {
	for passing := 0; ; {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			holders := lockHolders(f)
			if holders == "" && passing < 3 {
				passing++
				time.Sleep(time.Millisecond)
				continue
			}
			return &Error{Path: path, Err: ErrInUse, Detail: "locked" + holders,
				Fix: "wait until the sandbox using it is deleted, or use another image"}
		default:
			return fmt.Errorf("lock %s: %w", path, err)
		}
	}
}

// lockHolders names the processes the kernel lists in /proc/locks as
// holding a flock of f's file (" by pid N (comm)"; the pid that took the
// lock: a process it forked may hold it on), or "" if none is found.
func lockHolders(f *os.File) string {
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return ""
	}
	// "1: FLOCK  ADVISORY  WRITE 4711 fd:01:123456 0 EOF": the device as
	// major:minor in hex, the inode in decimal.
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(uint64(sys.Dev)), unix.Minor(uint64(sys.Dev)), sys.Ino)
	var who []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[5] != id {
			continue
		}
		pid := fields[4]
		comm, _ := os.ReadFile(filepath.Join("/proc", pid, "comm"))
		who = append(who, fmt.Sprintf("pid %s (%s, %s)", pid, strings.TrimSpace(string(comm)), strings.ToLower(fields[3])))
	}
	if len(who) == 0 {
		return ""
	}
	return " by " + strings.Join(who, ", ")
}

// checkNotAttached fails with ErrInUse when the image backs a loop device,
// i.e. is (or was left) mounted without holding a lease. It compares
// device and inode, so it is not fooled by different paths to one file.
func checkNotAttached(f *os.File, path string) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if dev := loopdev.Backing(st); dev != "" {
		return &Error{Path: path, Err: ErrInUse, Detail: "attached to " + dev,
			Fix: "unmount it and detach the loop device (`umount -d DIR` or `losetup -d " + dev + "`) first"}
	}
	return nil
}
