// Package hostbind gives a sandbox its host bind mounts (Kubernetes
// hostPath volumes, `nerdctl -v`, `ctr --mount`) the way runc gives them
// to a container running as host root, without giving the sandbox host
// root.
//
// The sandbox's gofer and Sentry run as an unprivileged host uid (the
// sandbox's user namespace maps guest root to host uid 100000), so a host
// directory only root may read (mode 0700, owned by host root) is
// permission-denied to them. gvx-sentry, still host root and in its own
// private mount namespace (package volmount), clones such a source
// (open_tree), idmaps the clone to the sandbox's user namespace
// (mount_setattr MOUNT_ATTR_IDMAP: host uid 0 appears as guest root),
// attaches it at a staging path next to the task's flags, and points the
// spec's mount at the staging path. gVisor's gofer then bind-mounts the
// staging path as it would the source. The clone exists only in the
// private mount namespace, and goes with the sandbox's last process.
//
// The same clone carries two more things gVisor's own bind mounts lack:
//
//   - "rro" (recursive read-only, which containerd asks for once the
//     runtime advertises it): the clone is read-only at every submount,
//     on the host's kernel (MOUNT_ATTR_RDONLY, AT_RECURSIVE), and the
//     guest's mount is read-only.
//   - "ro" of an rbind (read-only, not recursively): in the guest, one
//     spec mount is one gVisor mount, whose read-only flag covers every
//     directory below it — host submounts included. Linux leaves those
//     submounts writable; Plan lists each submount of the source as a
//     mount of its own, with its own flags, so the guest sees them so.
//
// A source is resolved once, to a descriptor: symlinks the host path
// holds are resolved first (as runc and containerd do for the path they
// are given), then the resolved path is opened with openat2
// RESOLVE_NO_SYMLINKS, so a symlink swapped into it meanwhile makes the
// create fail instead of mounting what it points to; everything after
// works on that descriptor.
package hostbind

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
)

// A Bind is one bind mount of a create's spec that gvx-sentry clones.
type Bind struct {
	Index     int    // in spec.Mounts
	Source    string // the spec's source, symlinks resolved
	Staging   string // where the clone is attached
	Dir       bool   // the source is a directory (else a regular file)
	Recursive bool   // rbind: the clone holds the source's submounts
	IDMap     bool   // idmap the clone to the sandbox's user namespace
	RRO       bool   // recursively read-only
	// Subs is how many mounts after Index are the source's submounts,
	// sourced inside the clone (a read-only rbind's, see Plan).
	Subs int
}

// Plan returns the bind mounts of spec that gvx-sentry clones, with
// staging paths under dir (Apply creates them), and rewrites spec's read-
// only rbind mounts so that their submounts keep their own flags in the
// guest (see the package doc). skip holds sources gvx set up itself (ext4
// volume staging points), mounted as they are.
//
// A source is idmapped when the sandbox has a user namespace, the source
// is a directory or regular file, and its owner is outside the sandbox's
// host uid range: one the user prepared for the unprivileged sandbox (as
// gvx documented before idmapping, chown 100000) is mounted as it is,
// idmapping it would shift its owner out of the guest's range.
func Plan(spec *specs.Spec, dir string, skip []string) ([]Bind, error) {
	var uid *specs.LinuxIDMapping
	if spec.Linux != nil && len(spec.Linux.UIDMappings) == 1 {
		uid = &spec.Linux.UIDMappings[0]
	}
	var binds []Bind
	var out []specs.Mount
	var mounts []mountInfo // read once, if needed
	for _, m := range spec.Mounts {
		if !isBind(m) || slices.Contains(skip, m.Source) || len(m.UIDMappings) > 0 || !filepath.IsAbs(m.Source) {
			out = append(out, m)
			continue
		}
		rro := slices.Contains(m.Options, "rro")
		src, err := filepath.EvalSymlinks(m.Source)
		if err != nil {
			if rro {
				return nil, fmt.Errorf("recursively read-only mount %s: source %s: %w", m.Destination, m.Source, err)
			}
			out = append(out, m) // gVisor reports a missing source itself
			continue
		}
		st, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("mount %s: source %s: %w", m.Destination, src, err)
		}
		b := Bind{Index: len(out), Source: src, Dir: st.IsDir(), Recursive: isRecursive(m), RRO: rro}
		regular := st.IsDir() || st.Mode().IsRegular()
		if uid != nil && regular {
			owner := statUID(st)
			b.IDMap = owner < uid.HostID || owner-uid.HostID >= uid.Size
		}
		if rro {
			// Read-only in the guest too (gVisor ignores "rro").
			m.Options = withReadOnly(m.Options)
		}
		var subs []specs.Mount
		readOnly := slices.Contains(m.Options, "ro") && !rro
		if readOnly && b.Recursive && b.Dir {
			if mounts == nil {
				if mounts, err = readMountInfo("/proc/self/mountinfo"); err != nil {
					return nil, err
				}
			}
			subs = submounts(m, src, mounts)
		}
		if !b.IDMap && !b.RRO {
			out = append(out, m)
			out = append(out, subs...)
			continue
		}
		if !regular {
			return nil, fmt.Errorf("recursively read-only mount %s: source %s is neither a directory nor a regular file", m.Destination, src)
		}
		b.Staging = filepath.Join(dir, strconv.Itoa(len(binds)))
		m.Source = b.Staging
		out = append(out, m)
		b.Subs = len(subs)
		for _, s := range subs {
			// The submount, inside the clone.
			s.Source = filepath.Join(b.Staging, strings.TrimPrefix(s.Source, src))
			out = append(out, s)
		}
		binds = append(binds, b)
	}
	spec.Mounts = out
	return binds, nil
}

func isBind(m specs.Mount) bool {
	return m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
}

func isRecursive(m specs.Mount) bool { return slices.Contains(m.Options, "rbind") }

// withReadOnly replaces rro (and any rw) by ro.
func withReadOnly(opts []string) []string {
	out := make([]string, 0, len(opts))
	for _, o := range opts {
		if o != "rro" && o != "rw" && o != "ro" {
			out = append(out, o)
		}
	}
	return append(out, "ro")
}

func statUID(st os.FileInfo) uint32 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Uid
	}
	return 0
}

// mountInfo is one line of /proc/self/mountinfo: the mount's id, its
// mount point, whether it is read-only, and whether it is in a peer group
// or receives from one (shared:N, master:N).
type mountInfo struct {
	id         uint64
	point      string
	readOnly   bool
	propagates bool
}

func readMountInfo(path string) ([]mountInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var out []mountInfo
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if mi, ok := parseMountInfo(sc.Text()); ok {
			out = append(out, mi)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	return out, nil
}

// parseMountInfo reads a mountinfo line: "id parent maj:min root point
// opts ...".
func parseMountInfo(line string) (mountInfo, bool) {
	f := strings.Fields(line)
	if len(f) < 6 {
		return mountInfo{}, false
	}
	id, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return mountInfo{}, false
	}
	mi := mountInfo{id: id, point: unescape(f[4]), readOnly: slices.Contains(strings.Split(f[5], ","), "ro")}
	for _, o := range f[6:] {
		if o == "-" {
			break
		}
		if strings.HasPrefix(o, "shared:") || strings.HasPrefix(o, "master:") {
			mi.propagates = true
		}
	}
	return mi, true
}

// unescape undoes mountinfo's octal escapes (\040 for a space, …).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// submounts are the mounts of m's source src's submounts that are not
// below another one (those come with their parent): each one rbind of
// its own mount point with the host mount's read-only flag and m's
// propagation, at the matching place under m's destination.
func submounts(m specs.Mount, src string, mounts []mountInfo) []specs.Mount {
	var points []mountInfo
	for _, mi := range mounts {
		if strings.HasPrefix(mi.point, src+"/") {
			points = append(points, mi)
		}
	}
	var out []specs.Mount
	seen := map[string]bool{}
	for _, mi := range points {
		top := true
		for _, o := range points {
			if o.point != mi.point && strings.HasPrefix(mi.point, o.point+"/") {
				top = false
				break
			}
		}
		if !top || seen[mi.point] {
			continue
		}
		// A point mounted over more than once: the last line is on top.
		ro := mi.readOnly
		for _, o := range points {
			if o.point == mi.point {
				ro = o.readOnly
			}
		}
		seen[mi.point] = true
		opts := []string{"rbind", "rw"}
		if ro {
			opts = []string{"rbind", "ro"}
		}
		for _, o := range m.Options {
			switch o {
			case "private", "rprivate", "slave", "rslave", "nosuid", "nodev", "noexec":
				opts = append(opts, o)
			}
		}
		out = append(out, specs.Mount{
			Destination: filepath.Join(m.Destination, strings.TrimPrefix(mi.point, src)),
			Type:        "bind",
			Source:      mi.point,
			Options:     opts,
		})
	}
	return out
}

// Apply makes each bind's clone and attaches it at its staging path: in
// gvx-sentry's private mount namespace, as host root, before gVisor's
// create. userns is the sandbox's user namespace (nil: none, no bind is
// idmapped). A source whose filesystem cannot be idmapped (procfs, sysfs,
// …) is mounted as it is unless it is recursively read-only, which is
// then cloned without the idmap.
func Apply(spec *specs.Spec, binds []Bind, userns *os.File) error {
	for _, b := range binds {
		if err := apply(spec, b, userns); err != nil {
			return err
		}
	}
	return nil
}

func apply(spec *specs.Spec, b Bind, userns *os.File) error {
	m := &spec.Mounts[b.Index]
	fd, err := openResolved(b.Source)
	if err != nil {
		return fmt.Errorf("mount %s: %w", m.Destination, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("mount %s: stat source %s: %w", m.Destination, b.Source, err)
	}
	if isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR; isDir != b.Dir || (!isDir && st.Mode&unix.S_IFMT != unix.S_IFREG) {
		return fmt.Errorf("mount %s: source %s changed type while gvx-sentry opened it", m.Destination, b.Source)
	}
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_EMPTY_PATH)
	if b.Recursive {
		flags |= unix.AT_RECURSIVE
	}
	tree, err := unix.OpenTree(fd, "", flags)
	if err != nil {
		return fmt.Errorf("mount %s: clone source %s: %w", m.Destination, b.Source, err)
	}
	defer unix.Close(tree)
	idmapped := false
	if b.IDMap && userns != nil {
		idmapped, err = idmap(tree, userns, b.Recursive)
		if err != nil {
			return fmt.Errorf("mount %s: idmap source %s to the sandbox's user namespace: %w", m.Destination, b.Source, err)
		}
	}
	if !idmapped && !b.RRO {
		// Nothing to add: the source as it is (as before gvx idmapped),
		// its submounts too.
		m.Source = b.Source
		for i := b.Index + 1; i <= b.Index+b.Subs; i++ {
			spec.Mounts[i].Source = filepath.Join(b.Source, strings.TrimPrefix(spec.Mounts[i].Source, b.Staging))
		}
		return nil
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID}
	if b.RRO {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	// Every mount of the clone: a recursively read-only mount is so at
	// each submount.
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("mount %s: set attributes of the clone of %s: %w", m.Destination, b.Source, err)
	}
	if err := makeStaging(b.Staging, b.Dir); err != nil {
		return fmt.Errorf("mount %s: %w", m.Destination, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, b.Staging, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount %s: attach the clone of %s at %s: %w", m.Destination, b.Source, b.Staging, err)
	}
	if err := joinPropagation(fd, b); err != nil {
		return fmt.Errorf("mount %s: %w", m.Destination, err)
	}
	return nil
}

// joinPropagation makes the clone at b.Staging (and each submount in it)
// receive what the host mounts under the source later, as a bind mount
// would: open_tree's clone is private, so it is put in the propagation
// group of the mount it was cloned from (move_mount
// MOVE_MOUNT_SET_GROUP). In gvx-sentry's namespace every mount is a slave
// of the host's, so the clone becomes one too: mounts propagate to it
// from the host, never back. A source on a private mount has none to
// join. gVisor's gofer then applies the spec's own propagation (rprivate
// stops it, rslave keeps it).
func joinPropagation(src int, b Bind) error {
	mounts, err := readMountInfo("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var stx unix.Statx_t
	if err := unix.Statx(src, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &stx); err != nil {
		return fmt.Errorf("mount id of %s: %w", b.Source, err)
	}
	byID := map[uint64]mountInfo{}
	for _, mi := range mounts {
		byID[mi.id] = mi
	}
	if top, ok := byID[stx.Mnt_id]; ok && top.propagates {
		if err := setGroup(top.point, stx.Mnt_id, b.Staging, byID); err != nil {
			return fmt.Errorf("propagation from %s to the clone of %s: %w", top.point, b.Source, err)
		}
	}
	if !b.Recursive || !b.Dir {
		return nil
	}
	for _, mi := range mounts {
		if !mi.propagates || !strings.HasPrefix(mi.point, b.Source+"/") {
			continue
		}
		to := filepath.Join(b.Staging, strings.TrimPrefix(mi.point, b.Source))
		if err := setGroup(mi.point, mi.id, to, byID); err != nil {
			return fmt.Errorf("propagation from %s to its clone at %s: %w", mi.point, to, err)
		}
	}
	return nil
}

// setGroup puts the mount at to in the propagation group of mount id,
// whose root is at point, unless it is in one already (a clone of a
// slave is a slave of the same master).
func setGroup(point string, id uint64, to string, mounts map[uint64]mountInfo) error {
	var tst unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, to, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &tst); err != nil {
		return err
	}
	if mounts[tst.Mnt_id].propagates {
		return nil
	}
	from, err := openResolved(point)
	if err != nil {
		return err
	}
	defer unix.Close(from)
	var stx unix.Statx_t
	if err := unix.Statx(from, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &stx); err != nil {
		return err
	}
	if stx.Mnt_id != id {
		// Mounted over since: that mount is not the clone's origin.
		return nil
	}
	return unix.MoveMount(from, "", unix.AT_FDCWD, to, unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_SET_GROUP)
}

// idmap idmaps the clone tree (each of its mounts if recursive, else its
// top) to userns. It reports false, without an error, when the source's
// filesystem does not support idmapped mounts; a recursive clone whose
// submounts do not is idmapped at its top only.
func idmap(tree int, userns *os.File, recursive bool) (bool, error) {
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns.Fd())}
	if recursive {
		err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EPERM) {
			return false, err
		}
	}
	err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) {
		return false, nil
	}
	return err == nil, err
}

// openResolved opens path (already symlink-resolved) as an O_PATH
// descriptor, refusing any symlink in it: one there now was swapped in
// after Plan resolved the path.
func openResolved(path string) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &how)
	if errors.Is(err, unix.ELOOP) {
		return -1, fmt.Errorf("source %s: a symlink appeared in its path while gvx-sentry mounted it; refusing to follow it", path)
	}
	if err != nil {
		return -1, fmt.Errorf("open source %s: %w", path, err)
	}
	return fd, nil
}

// makeStaging creates the (empty) mount point a clone is attached at:
// a directory or a file, traverse-only for the sandbox's gofer.
func makeStaging(path string, dir bool) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return fmt.Errorf("staging directory: %w", err)
	}
	if dir {
		if err := os.Mkdir(path, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("staging point: %w", err)
		}
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return fmt.Errorf("staging point: %w", err)
	}
	return f.Close()
}

// Dir is the staging directory of a task's clones: next to its flags
// (taskDir, the directory of its gvx-sentry link), removed with them.
func Dir(taskDir string) string { return filepath.Join(taskDir, api.HostBindDir) }
