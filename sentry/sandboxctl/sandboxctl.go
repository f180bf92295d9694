// Package sandboxctl lets gvx's helper processes talk to a running sandbox
// without host privileges.
//
// The helpers are long-lived (a container's monitor, an exec's waiter):
// they open a control connection while still root, then drop to the
// sandbox's own host credentials. Alive tells whether the sandbox's host
// process still runs.
package sandboxctl

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/pkg/control/client"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sentry/control"
	"gvisor.dev/gvisor/pkg/urpc"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/sentry/hostcreds"
	"github.com/gvxrun/gvx/sentry/monitor"
)

// Alive reports whether the host process of c's sandbox runs (is neither
// gone nor a zombie). gVisor's own check (a signal 0) takes a zombie for a
// running sandbox: one killed from outside whose parent has not reaped it.
func Alive(c *container.Container) bool {
	return c.Sandbox != nil && procfs.Alive(int(c.Sandbox.Pid.Load()))
}

// Connect connects to the control socket of c's sandbox (whose path may
// exceed sun_path: monitor.ShortPath).
func Connect(c *container.Container) (*urpc.Client, error) {
	var conn *urpc.Client
	err := monitor.ShortPath(c.Sandbox.ControlSocketPath, func(name string) (err error) {
		conn, err = client.ConnectTo(name)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: control %w", c.Sandbox.ID, err)
	}
	return conn, nil
}

// ConnectN opens n control connections to c's sandbox (Connect), closing
// those it opened if one fails.
func ConnectN(c *container.Container, n int) ([]*urpc.Client, error) {
	conns := make([]*urpc.Client, 0, n)
	for range n {
		conn, err := Connect(c)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, err
		}
		conns = append(conns, conn)
	}
	return conns, nil
}

// DropPrivileges leaves the calling process, which from now on only talks
// to the sandbox over connections it already has, with the sandbox's own
// host credentials (hostcreds.Drop).
func DropPrivileges(spec *specs.Spec) {
	if err := hostcreds.Drop(HostRoot(spec)); err != nil {
		log.Warningf("keeps its privileges: %v", err)
	}
}

// HostRoot returns the host uid and gid the spec maps container root to (0
// without a user namespace).
func HostRoot(spec *specs.Spec) (int, int) { return hostcreds.HostRoot(spec) }

// NotRunning wraps err, the failure to signal guest process pid (0: all
// processes) of sandbox sb, in api.NotRunning when the sandbox is gone (its
// host process has exited) or pid is no longer among the processes that
// processes lists; otherwise it returns err.
func NotRunning(err error, sb *container.Container, pid int32, processes func() ([]*control.Process, error)) error {
	if !Alive(sb) {
		return fmt.Errorf("%s: sandbox %s is gone: %w", api.NotRunning, sb.ID, err)
	}
	if pid == 0 {
		return err
	}
	if procs, perr := processes(); perr == nil && !HasProcess(procs, pid) {
		return fmt.Errorf("%s: process %d has exited: %w", api.NotRunning, pid, err)
	}
	return err
}

// HasProcess reports whether guest pid is among procs.
func HasProcess(procs []*control.Process, pid int32) bool {
	for _, p := range procs {
		if int32(p.PID) == pid {
			return true
		}
	}
	return false
}
