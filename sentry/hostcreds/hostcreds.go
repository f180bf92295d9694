// Package hostcreds is about the host credentials of a sandbox's helper
// processes.
//
// It knows the host ids a spec maps the sandbox's root to, and drops a
// process to them. It does not depend on gVisor (gvx-runtime uses it).
package hostcreds

import (
	"fmt"
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
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	// no_new_privs is per thread: set it on all of them.
	if _, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); errno != 0 {
		return fmt.Errorf("no_new_privs: %w", errno)
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	return nil
}
