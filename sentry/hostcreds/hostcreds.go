// Package hostcreds is about the host credentials of a sandbox's helper
// processes.
//
// It knows the host ids a spec maps the sandbox's root to, and drops a
// process to them. It does not depend on gVisor (gvx-runtime uses it).
package hostcreds

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// HostRoot returns the host uid and gid the spec maps container root to (0
// without a user namespace).
func HostRoot(spec *specs.Spec) (int, int) {
	if spec == nil || spec.Linux == nil {
		return 0, 0
	}
	uid, gid := 0, 0
	for _, m := range spec.Linux.UIDMappings {
		if m.ContainerID == 0 {
			uid = int(m.HostID)
		}
	}
	for _, m := range spec.Linux.GIDMappings {
		if m.ContainerID == 0 {
			gid = int(m.HostID)
		}
	}
	return uid, gid
}

// Drop leaves the calling process with host uid and gid only: no
// supplementary groups, no capabilities, no new privileges (on every
// thread), not dumpable. uid 0 drops nothing.
func Drop(uid, gid int) error {
	if uid == 0 {
		return nil
	}
	if !hasIDs(uid, gid) {
		if err := setIDs(uid, gid); err != nil {
			return err
		}
	}
	// no_new_privs is per thread: set it on all of them.
	if _, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); errno != 0 {
		return fmt.Errorf("no_new_privs: %w", errno)
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	return nil
}

// hasIDs reports whether the calling process already has exactly host uid
// and gid and no supplementary group (started by Start): then changing
// them would need privileges it no longer has.
func hasIDs(uid, gid int) bool {
	if r, e, s := unix.Getresuid(); r != uid || e != uid || s != uid {
		return false
	}
	if r, e, s := unix.Getresgid(); r != gid || e != gid || s != gid {
		return false
	}
	groups, err := syscall.Getgroups()
	return err == nil && len(groups) == 0
}

// setIDs leaves the calling process (a privileged one) with host uid and
// gid only.
func setIDs(uid, gid int) error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	return nil
}

// Start starts cmd (run by a privileged process) with host uid and gid
// only from its first instruction: no supplementary groups, no
// capabilities (a uid ≠ 0 loses them at the switch), no_new_privs. So no
// instant of it is privileged, unlike a child that drops after exec
// (Drop). The binary is executed through a descriptor this process opens
// (or /proc/self/exe, this process's own), so the directories above it
// need not be searchable by uid; it must be executable by uid. uid 0
// starts cmd unchanged.
func Start(cmd *exec.Cmd, uid, gid int) error {
	if uid == 0 {
		return cmd.Start()
	}
	if cmd.Path != "/proc/self/exe" {
		path := cmd.Path
		fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", path, err)
		}
		defer unix.Close(fd)
		// Above every descriptor the fork moves cmd's files through on
		// their way to 0, 1, 2, 3, … (at most twice their number).
		high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 2*(3+len(cmd.ExtraFiles)))
		if err != nil {
			return fmt.Errorf("open %s: %w", path, err)
		}
		defer unix.Close(high)
		cmd.Path = fmt.Sprintf("/proc/self/fd/%d", high)
		defer func() { cmd.Path = path }()
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	// no_new_privs is a thread's attribute, inherited by what it forks:
	// set it on a thread of its own, which forks cmd and then ends with
	// its goroutine (never unlocked; the Go runtime parks the main thread
	// instead), so no other goroutine runs there.
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			errc <- fmt.Errorf("no_new_privs: %w", err)
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}
