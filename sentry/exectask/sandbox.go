package exectask

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/sentry/control"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/sandboxctl"
)

// sandbox loads the running sandbox (root container) of task r.
func sandbox(root string, r *record.Record) (*container.Container, error) {
	c, err := container.Load(root, container.FullID{SandboxID: r.Sandbox, ContainerID: r.Sandbox}, container.LoadOpts{SkipCheck: true})
	if err != nil {
		return nil, fmt.Errorf("sandbox %s of task %s: %w", r.Sandbox, r.ID, err)
	}
	return c, nil
}

// notRunning wraps err, the failure to signal guest process pid (0: all
// processes) of sandbox sb, in api.NotRunning when the sandbox is gone (its
// host process has exited) or pid is no longer among the processes that
// processes lists; otherwise it returns err.
func notRunning(err error, sb *container.Container, pid int32, processes func() ([]*control.Process, error)) error {
	if !sandboxctl.Alive(sb) {
		return fmt.Errorf("%s: sandbox %s is gone: %w", api.NotRunning, sb.ID, err)
	}
	if pid == 0 {
		return err
	}
	if procs, perr := processes(); perr == nil && !hasProcess(procs, pid) {
		return fmt.Errorf("%s: process %d has exited: %w", api.NotRunning, pid, err)
	}
	return err
}

// hasProcess reports whether guest pid is among procs.
func hasProcess(procs []*control.Process, pid int32) bool {
	for _, p := range procs {
		if int32(p.PID) == pid {
			return true
		}
	}
	return false
}
