package volume

import (
	"fmt"
	"os"
	"syscall"
)

// checkOwner refuses an image someone other than root may write: its
// owner, or its group or everyone through the mode bits, could change it
// between Verify and the mount — or under the host's ext4 driver while it
// is mounted — so no check of its contents would hold. (The path cannot
// be swapped after the check: the shim hands gvx-sentry the descriptor it
// checked, see Lease.OpenPath.)
func checkOwner(f *os.File, path string) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	mode := st.Mode().Perm()
	var who string
	switch {
	case sys.Uid != 0:
		who = fmt.Sprintf("owned by uid %d", sys.Uid)
	case mode&0o002 != 0:
		who = "writable by everyone"
	case mode&0o020 != 0 && sys.Gid != 0:
		who = fmt.Sprintf("writable by group %d", sys.Gid)
	default:
		return nil
	}
	return &Error{Path: path, Err: ErrUnsafe, Detail: fmt.Sprintf("%s, mode %04o: it could change after it is checked, under the host's ext4 driver", who, mode),
		Fix: fmt.Sprintf("nothing was mounted; give it to root and take the others' write permission (`chown root:root %s && chmod go-w %s`), or use a copy only root can write (`gvx volume clone`)", path, path)}
}

// OpenPath is a path to the lease's own descriptor (/proc/PID/fd/N of
// the holding process): opening it opens the very file that was locked
// and checked, whatever the image's path names by then.
func (l *Lease) OpenPath() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return ""
	}
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), l.f.Fd())
}
