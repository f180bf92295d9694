package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
)

// leaseStage is where a lease root is put together before it is stacked
// on "/": a directory of the root container's /dev (always there, and a
// tmpfs of the sandbox's own).
const leaseStage = "/dev/.gvx-lease"

// mountEntry is one line of /proc/<pid>/mountinfo.
type mountEntry struct {
	point  string // relative to the reader's root
	flags  string // per-mount options (rw,nosuid,…)
	fstype string
	super  string // the filesystem's options
}

// readMounts parses the mountinfo at path.
func readMounts(path string) ([]mountEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountEntry
	for sc := bufio.NewScanner(f); sc.Scan(); {
		// id parent major:minor root point flags [optional…] - fstype source super
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if !ok || len(a) < 6 || len(b) < 2 {
			return nil, fmt.Errorf("%s: bad line %q", path, sc.Text())
		}
		e := mountEntry{point: unescape(a[4]), flags: a[5], fstype: b[0]}
		if len(b) > 2 {
			e.super = b[2]
		}
		out = append(out, e)
	}
	return out, nil
}

// unescape undoes mountinfo's octal escapes (\040 for a space, …).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			var c int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(byte(c))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// killAll SIGKILLs every guest process but pid 1 and this one, and waits
// (up to 5 s) until /proc lists none of them.
func killAll(fail func(string, ...any)) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := processes(fail)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			fail("lease: processes left after SIGKILL: %q", left)
			return
		}
		for _, p := range left {
			var pid int
			if _, err := fmt.Sscanf(p, "%d", &pid); err == nil {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newInstance are the filesystem types a lease root gets a fresh
// instance of (their per-mount and filesystem options copied); any other
// submount of the root container (a bind of a host file) is bound again.
var newInstance = map[string]bool{"proc": true, "sysfs": true, "devpts": true, "mqueue": true, "tmpfs": true, "dev": true}

// beginLease stacks a new lease root on "/": an overlay whose lower layer
// is the root container's root filesystem and whose upper layer is a
// fresh tmpfs, with every submount of the root container made again in
// it (fresh instances; binds bound again). It runs in gvx-pause, whose
// root is the root container's own, and returns the lease root's root
// directory (O_PATH): gvx-pause, its root under the stack, can unmount
// the stack only through that (leaseAgent). A positive size caps the
// upper layer (what the lease's commands write): a write past it fails
// with ENOSPC.
func beginLease(size int64) (*os.File, error) {
	ms, err := readMounts("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(leaseStage, 0o700); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	defer os.Remove(leaseStage)
	opts := "mode=0700"
	if size > 0 {
		opts += fmt.Sprintf(",size=%d", size)
	}
	if err := unix.Mount("tmpfs", leaseStage, "tmpfs", 0, opts); err != nil {
		return nil, fmt.Errorf("lease: tmpfs at %s: %w", leaseStage, err)
	}
	// The stage goes once the root is stacked; the overlay keeps its
	// upper layer.
	defer unix.Unmount(leaseStage, unix.MNT_DETACH)
	upper, work, root := leaseStage+"/upper", leaseStage+"/work", leaseStage+"/root"
	for _, d := range []string{upper, work, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, fmt.Errorf("lease: %w", err)
		}
	}
	if err := unix.Mount("overlay", root, "overlay", 0, "lowerdir=/,upperdir="+upper+",workdir="+work); err != nil {
		return nil, fmt.Errorf("lease: overlay of / at %s: %w", root, err)
	}
	dir, err := os.OpenFile(root, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	for _, m := range ms {
		if m.point == "/" || m.point == leaseStage || strings.HasPrefix(m.point, leaseStage+"/") {
			continue
		}
		if err := remount(root, m); err != nil {
			dir.Close()
			return nil, fmt.Errorf("lease: %s: %w", m.point, err)
		}
	}
	// Moved, not bound: dir stays the stacked mount's root.
	if err := unix.Mount(root, "/", "", unix.MS_MOVE, ""); err != nil {
		dir.Close()
		return nil, fmt.Errorf("lease: stack the lease root on /: %w", err)
	}
	return dir, nil
}

// writeInto writes files (paths relative to root) into the directory
// root, replacing what is there (a symlink included), creating a missing
// parent directory.
func writeInto(root *os.File, files map[string]string) error {
	dir := int(root.Fd())
	for name, content := range files {
		rel := strings.TrimPrefix(filepath.Clean("/"+name), "/")
		if rel == "" {
			return fmt.Errorf("lease: no file name in %q", name)
		}
		if parent := filepath.Dir(rel); parent != "." {
			if err := unix.Mkdirat(dir, parent, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("lease: mkdir %s: %w", parent, err)
			}
		}
		if err := unix.Unlinkat(dir, rel, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("lease: remove %s: %w", rel, err)
		}
		fd, err := unix.Openat(dir, rel, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return fmt.Errorf("lease: create %s: %w", rel, err)
		}
		f := os.NewFile(uintptr(fd), rel)
		_, werr := f.WriteString(content)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fmt.Errorf("lease: write %s: %w", rel, werr)
		}
	}
	return nil
}

// leaseAgent serves a lease pool's resets (api.PauseAgentArg) on conn,
// gvx-pause's standard input: a socket to the pool's server. For each
// request (an api.PauseAgentRequest, one JSON line) it ends the lease
// root it stacked last — every other guest process killed, the stack
// unmounted —, restores what containers share, reports the guest's
// state, stacks a new lease root and answers with the report (one JSON
// line). It runs in gvx-pause, the root container's init, in the root
// container's own root: no process is started for a reset.
func leaseAgent(conn *os.File) {
	r := bufio.NewReader(conn)
	enc := json.NewEncoder(conn)
	var lease *os.File
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		var req api.PauseAgentRequest
		var st api.GuestState
		fail := func(format string, a ...any) { st.Errors = append(st.Errors, fmt.Sprintf(format, a...)) }
		if err := json.Unmarshal(line, &req); err != nil {
			fail("request %q: %v", line, err)
		}
		if lease != nil {
			killAll(fail)
			if err := unix.Unmount(fmt.Sprintf("/proc/self/fd/%d", lease.Fd()), unix.MNT_DETACH); err != nil {
				fail("lease: unmount the lease root: %v", err)
			}
			lease.Close()
			lease = nil
		}
		if len(st.Errors) == 0 {
			restoreShared(req.Hostname, req.Domainname, fail)
		}
		report(&st, fail)
		if len(st.Errors) == 0 {
			if lease, err = beginLease(req.RootBytes); err != nil {
				fail("%v", err)
			} else if err := writeInto(lease, req.Files); err != nil {
				fail("%v", err)
			}
		}
		if err := enc.Encode(&st); err != nil {
			return
		}
	}
}

// remount makes mount m again under root.
func remount(root string, m mountEntry) error {
	target := filepath.Join(root, m.point)
	if err := os.MkdirAll(target, 0o755); err != nil && !errors.Is(err, syscall.EEXIST) {
		// A file's mount point (a bound host file) exists in the
		// lower layer already; MkdirAll fails only for a missing one.
		if _, serr := os.Lstat(target); serr != nil {
			return err
		}
	}
	var flags uintptr
	for _, o := range strings.Split(m.flags, ",") {
		switch o {
		case "ro":
			flags |= unix.MS_RDONLY
		case "nosuid":
			flags |= unix.MS_NOSUID
		case "nodev":
			flags |= unix.MS_NODEV
		case "noexec":
			flags |= unix.MS_NOEXEC
		}
	}
	if newInstance[m.fstype] {
		var data []string
		for _, o := range strings.Split(m.super, ",") {
			if strings.HasPrefix(o, "mode=") || strings.HasPrefix(o, "size=") {
				data = append(data, o)
			}
		}
		fstype := m.fstype
		if fstype == "dev" {
			// gVisor's devtmpfs names itself "dev".
			fstype = "devtmpfs"
		}
		if err := unix.Mount("none", target, fstype, flags, strings.Join(data, ",")); err != nil {
			return fmt.Errorf("mount %s: %w", fstype, err)
		}
		return nil
	}
	// This process runs in the root container's own root: m.point is
	// the mount to bind again.
	if err := unix.Mount(m.point, target, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	if flags != 0 {
		return unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|flags, "")
	}
	return nil
}
