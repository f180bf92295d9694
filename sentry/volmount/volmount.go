// Package volmount mounts gvx's ext4lite volumes in a sandbox's private mount
// namespace.
//
// The host's mount table never shows them, and their loop devices
// disappear with the sandbox.
//
// The shim lists the volumes in the spec annotation api.AnnotationVolumes
// and turns each into an ordinary bind mount from a staging directory.
// gvx-sentry, when asked to create such a sandbox, re-executes itself in a
// new mount namespace (Reexec), attaches each image to an auto-clearing
// loop device, mounts it idmapped to the sandbox's user namespace at its
// staging directory (Mount), and only then runs gVisor's create, whose
// gofer and Sentry inherit that namespace. When the last sandbox process
// exits, the namespace, the mounts and the loop devices go with it.
package volmount

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/hostbind"
	"github.com/gvxrun/gvx/sentry/monitor"
)

// reexecEnv marks the re-executed gvx-sentry running in its own mount
// namespace.
const reexecEnv = "GVX_SENTRY_MNTNS"

// FromSpec returns the volumes the spec's api.AnnotationVolumes lists.
func FromSpec(s *specs.Spec) ([]api.Volume, error) {
	return api.DecodeVolumes(s.Annotations[api.AnnotationVolumes])
}

// CreateBundle returns the bundle directory of a runc-style "create",
// "run" or "restore" invocation (argv as gvx-sentry received it: each
// boots a sandbox), and whether argv is one.
func CreateBundle(argv []string) (string, bool) {
	sub := -1
	for i, a := range argv[1:] {
		if a == "create" || a == "run" || a == "restore" {
			sub = i + 1
			break
		}
	}
	if sub < 0 {
		return "", false
	}
	for i := sub + 1; i < len(argv); i++ {
		a := strings.TrimLeft(argv[i], "-")
		if a == "bundle" || a == "b" {
			if i+1 < len(argv) {
				return argv[i+1], true
			}
		}
		if v, ok := strings.CutPrefix(a, "bundle="); ok {
			return v, true
		}
		if v, ok := strings.CutPrefix(a, "b="); ok {
			return v, true
		}
	}
	return bundle.Dir(""), true
}

// InPrivateNamespace reports whether this process is the re-executed one.
func InPrivateNamespace() bool { return os.Getenv(reexecEnv) == "1" }

// Reexec runs argv again in a new mount namespace and exits with its
// status. Its standard streams and extra files are this process's.
// (A create that goes on as the container's monitor, monitor.CreateHereEnv,
// exits at once: its report comes from the child.)
func Reexec(argv []string) error {
	cmd := exec.Command("/proc/self/exe", argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	InNewNamespace(cmd)
	// Pass through inherited descriptors (e.g. a console socket, sync
	// pipes): runc-style callers may hand the runtime extra fds.
	for fd := 3; fd < 64; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			continue
		}
		for len(cmd.ExtraFiles) < fd-3 {
			cmd.ExtraFiles = append(cmd.ExtraFiles, nil)
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, os.NewFile(uintptr(fd), fmt.Sprintf("fd%d", fd)))
	}
	if os.Getenv(monitor.CreateHereEnv) != "" {
		// A create that goes on as the container's monitor: the child
		// is it, and reports to gvx-runtime itself; this process has
		// nothing to wait for.
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("re-execute in a private mount namespace: %w", err)
		}
		os.Exit(0)
	}
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		return fmt.Errorf("re-execute in a private mount namespace: %w", err)
	}
	os.Exit(0)
	return nil
}

// InNewNamespace makes cmd, a gvx-sentry create, start in a new mount
// namespace of its own, as the re-executed one (Reexec) does: it then
// mounts there without re-executing itself. gvx-runtime, a small binary,
// starts gvx-sentry's creates in running sandboxes so (Needed), which
// saves a start of gvx-sentry's — the re-execution — for every such
// create with volumes or host binds (a CRI container's /etc/hosts,
// resolv.conf, hostname and termination log are root's).
func InNewNamespace(cmd *exec.Cmd) {
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, reexecEnv+"=1")
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Cloneflags, not Unshareflags: after unshare(CLONE_NEWNS) Go's
	// exec makes every mount private (MS_REC|MS_PRIVATE on /), which
	// would cut the sandbox off from the host's later mounts; Prepare
	// makes them slaves instead.
	cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNS
}

// UnshareForExec moves the calling thread — locked to it for good: an
// exec is to follow from it — into a new mount namespace, and returns
// environ marked so that gvx-sentry, executed from this thread, knows it
// starts in one (InPrivateNamespace) and mounts there without
// re-executing itself. The namespace is the thread's alone until the
// exec, which makes it the process's.
func UnshareForExec(environ []string) ([]string, error) {
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return environ, fmt.Errorf("new mount namespace: %w", err)
	}
	return append(slices.Clone(environ), reexecEnv+"=1"), nil
}

// Needed reports whether gvx-sentry's create of spec mounts anything in a
// private mount namespace: ext4lite volumes, or host bind mounts it
// clones (hostbind.Plan; the spec is not changed). A create that finds it
// needs one after all re-executes itself (Reexec).
func Needed(spec *specs.Spec) (bool, error) {
	vols, err := FromSpec(spec)
	if err != nil {
		return false, err
	}
	if len(vols) > 0 {
		return true, nil
	}
	cp := *spec // Plan replaces Mounts, and changes no element of it
	binds, err := hostbind.Plan(&cp, "", nil)
	if err != nil {
		return false, err
	}
	return len(binds) > 0, nil
}

// Prepare makes this (re-executed) process's mount namespace receive host
// mount events but send none back, then mounts every volume, idmapped
// through userns when it is set (UserNS).
func Prepare(vols []api.Volume, userns *os.File) error {
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	for _, v := range vols {
		if err := Mount(v, userns); err != nil {
			return err
		}
	}
	return nil
}

// UserNS returns a user namespace with the sandbox's id mappings, held
// open by a file (nil, and no error, when there are none), for idmapping
// mounts to it.
func UserNS(uidMap, gidMap []specs.LinuxIDMapping) (*os.File, error) {
	if len(uidMap) == 0 {
		return nil, nil
	}
	return usernsFD(uidMap, gidMap)
}

// Mount attaches v.Image to an auto-clearing loop device and mounts its
// ext4 filesystem at v.Staging, idmapped through userns when it is set.
// With v.Open it opens that instead: the shim's descriptor of the image
// it checked (a rename of v.Image since then changes nothing).
func Mount(v api.Volume, userns *os.File) error {
	mfd, err := detached(v, userns)
	if err != nil {
		return err
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, v.Staging, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("volume %s: attach at %s: %w", v.Image, v.Staging, err)
	}
	return nil
}

// detached returns v's ext4 filesystem as a mount attached nowhere yet
// (a descriptor), on an auto-clearing loop device, idmapped through userns
// when it is set.
func detached(v api.Volume, userns *os.File) (int, error) {
	open := v.Image
	if v.Open != "" {
		open = v.Open
	}
	loop, err := attachLoop(open, v.ReadOnly)
	if err != nil {
		return -1, fmt.Errorf("volume %s: %w", v.Image, err)
	}
	// The mount holds the loop device; closing our fd lets autoclear
	// detach it when the (last) mount goes.
	defer loop.Close()
	fsfd, err := unix.Fsopen("ext4", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("volume %s: fsopen ext4: %w", v.Image, err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "source", loop.Name()); err != nil {
		return -1, fmt.Errorf("volume %s: %w", v.Image, err)
	}
	if v.ReadOnly {
		if err := unix.FsconfigSetFlag(fsfd, "ro"); err != nil {
			return -1, fmt.Errorf("volume %s: %w", v.Image, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("volume %s: mount ext4 (is it a clean ext4 image? try `gvx volume check`): %w", v.Image, err)
	}
	attrs := unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID
	if v.ReadOnly {
		attrs |= unix.MOUNT_ATTR_RDONLY
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, attrs)
	if err != nil {
		return -1, fmt.Errorf("volume %s: fsmount: %w", v.Image, err)
	}
	if userns != nil {
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns.Fd())}
		if err := unix.MountSetattr(mfd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			unix.Close(mfd)
			return -1, fmt.Errorf("volume %s: idmap to the sandbox's user namespace: %w", v.Image, err)
		}
	}
	return mfd, nil
}

// MountInto mounts each of vols at its Destination inside process pid's
// mount namespace — a booted sandbox's gofer, whose root is the
// container's root filesystem — idmapped to pid's user namespace. A
// restore target's volumes are mounted so: the gofer serves a mount point
// by opening it when the Sentry first asks for it (a restore does), so it
// serves the volume mounted on top of the empty staging directory it
// bound there at its start. Destinations
// resolve inside pid's root (symbolic links in the image cannot lead out
// of it); the mounts exist in that namespace alone and go with it.
func MountInto(pid int, vols []api.Volume) error {
	proc := fmt.Sprintf("/proc/%d", pid)
	// A gofer has a mount and a user namespace of its own; a process
	// with either of this one's is no gofer (its pid reused, say), and
	// nothing is mounted where the host would see it.
	mntns, err := foreignNS(proc, "mnt")
	if err != nil {
		return err
	}
	defer mntns.Close()
	userns, err := foreignNS(proc, "user")
	if err != nil {
		return err
	}
	defer userns.Close()
	root, err := unix.Open(proc+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the gofer's root: %w", err)
	}
	defer unix.Close(root)
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, v := range vols {
		if v.Destination == "" {
			return fmt.Errorf("volume %s: no destination to mount it at", v.Image)
		}
		at, err := unix.Openat2(root, v.Destination, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return fmt.Errorf("volume %s: its mount point %s in the sandbox: %w", v.Image, v.Destination, err)
		}
		fds = append(fds, at)
		mfd, err := detached(v, userns)
		if err != nil {
			return err
		}
		fds = append(fds, mfd)
	}
	// move_mount attaches only in the caller's mount namespace; a thread
	// may enter another once it shares no filesystem attributes. This
	// one does and then ends (it stays locked, so Go never reuses it).
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- fmt.Errorf("unshare filesystem attributes: %w", err)
			return
		}
		if err := unix.Setns(int(mntns.Fd()), unix.CLONE_NEWNS); err != nil {
			errc <- fmt.Errorf("enter the gofer's mount namespace: %w", err)
			return
		}
		for i, v := range vols {
			if err := unix.MoveMount(fds[2*i+1], "", fds[2*i], "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
				errc <- fmt.Errorf("volume %s: attach at %s in the sandbox: %w", v.Image, v.Destination, err)
				return
			}
		}
		errc <- nil
	}()
	return <-errc
}

// foreignNS opens namespace kind (mnt, user) of process proc (/proc/PID),
// which must not be this process's own.
func foreignNS(proc, kind string) (*os.File, error) {
	var own, theirs unix.Stat_t
	if err := unix.Stat("/proc/self/ns/"+kind, &own); err != nil {
		return nil, fmt.Errorf("%s namespace: %w", kind, err)
	}
	f, err := os.Open(proc + "/ns/" + kind)
	if err == nil {
		err = unix.Fstat(int(f.Fd()), &theirs)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("the gofer's %s namespace: %w", kind, err)
	}
	if own.Ino == theirs.Ino && own.Dev == theirs.Dev {
		f.Close()
		return nil, fmt.Errorf("process %s shares this process's %s namespace: it is no sandbox's gofer; nothing was mounted", strings.TrimPrefix(proc, "/proc/"), kind)
	}
	return f, nil
}

// attachLoop binds image to a free loop device with autoclear set.
func attachLoop(image string, ro bool) (*os.File, error) {
	flags := os.O_RDWR
	if ro {
		flags = os.O_RDONLY
	}
	img, err := os.OpenFile(image, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/loop-control: %w", err)
	}
	defer ctl.Close()
	cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
	if ro {
		cfg.Info.Flags |= unix.LO_FLAGS_READ_ONLY
	}
	// Another process may take the free device between GET_FREE and
	// CONFIGURE; retry then.
	for attempt := 0; attempt < 20; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev, err := os.OpenFile(fmt.Sprintf("/dev/loop%d", n), flags|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("configure loop device: %w", err)
		}
		time.Sleep(time.Millisecond)
	}
	return nil, errors.New("no free loop device after 20 attempts")
}

// usernsFD returns a user namespace with the given mappings, held open by
// a file. A child is created in it, stopped before it runs anything (it is
// traced), and killed once the namespace is open.
func usernsFD(uidMap, gidMap []specs.LinuxIDMapping) (*os.File, error) {
	// The tracer of a traced child is the thread that forked it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command("/proc/self/exe")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: toSys(uidMap),
		GidMappings: toSys(gidMap),
		Ptrace:      true,
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("create user namespace: %w", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	if err != nil {
		return nil, fmt.Errorf("open user namespace: %w", err)
	}
	return f, nil
}

func toSys(m []specs.LinuxIDMapping) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, 0, len(m))
	for _, x := range m {
		out = append(out, syscall.SysProcIDMap{ContainerID: int(x.ContainerID), HostID: int(x.HostID), Size: int(x.Size)})
	}
	return out
}
