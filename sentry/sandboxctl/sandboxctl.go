// Package sandboxctl holds what gvx's long-lived helper processes (a
// container's monitor, an exec's waiter) need to talk to a running sandbox
// without host privileges: a control connection opened while still root,
// then dropping to the sandbox's own host credentials.
package sandboxctl

import (
	"fmt"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/control/client"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/urpc"
	"gvisor.dev/gvisor/runsc/container"
)

// Connect connects to the control socket of c's sandbox.
func Connect(c *container.Container) (*urpc.Client, error) {
	path := c.Sandbox.ControlSocketPath
	// The path may exceed sun_path; connect through an O_PATH fd.
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("control socket of sandbox %s: %w", c.Sandbox.ID, err)
	}
	defer unix.Close(fd)
	conn, err := client.ConnectTo(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return nil, fmt.Errorf("connect to sandbox %s: %w", c.Sandbox.ID, err)
	}
	return conn, nil
}

// DropPrivileges leaves the calling process, which from now on only talks
// to the sandbox over connections it already has, with the sandbox's own
// host credentials: the host ids the spec maps its root to, no
// capabilities, no new privileges, not dumpable.
func DropPrivileges(spec *specs.Spec) {
	uid, gid := HostRoot(spec)
	if uid == 0 {
		return
	}
	if err := syscall.Setgroups(nil); err != nil {
		log.Warningf("keeps root: setgroups: %v", err)
		return
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		log.Warningf("keeps root: setresgid: %v", err)
		return
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		log.Warningf("keeps root: setresuid: %v", err)
		return
	}
	// no_new_privs is per thread: set it on all of them.
	if _, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); errno != 0 {
		log.Warningf("no_new_privs: %v", errno)
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}

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
