package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/monitor"
)

// kill handles `kill [--all] <id> [signal]` of a running task whose
// monitor serves it: a task started as a process in a running sandbox (its
// monitor signals the process; --all is gvx-sentry's), or a container in
// one (its monitor signals the container's init, or with --all all its
// processes; after its init exited, its monitor killed the rest and
// marked it ended, and --all has nothing left to do), or a running
// sandbox's root container, signalled over the sandbox's control socket
// (rootKill).
func (c command) kill() (bool, error) {
	args, all := c.args, false
	if len(args) > 0 && (args[0] == "--all" || args[0] == "-all" || args[0] == "-a" || args[0] == "--a") {
		args, all = args[1:], true
	}
	if len(args) == 0 || len(args) > 2 || strings.HasPrefix(args[0], "-") {
		return false, nil // --pid, …: gvx-sentry's
	}
	id, name := args[0], "TERM"
	if len(args) == 2 {
		name = args[1]
	}
	sig, err := monitor.ParseSignal(name)
	if err != nil {
		return false, nil
	}
	req := monitor.Request{Op: monitor.OpSignal, Signal: int(sig), All: all}
	if r, err := record.Load(c.root, id); err == nil {
		if all || r.Pid == 0 {
			return false, nil // not started: gvx-sentry records the kill
		}
		req.Pid = r.Pid
	}
	ended := func() bool {
		data, err := os.ReadFile(api.SentryRoot(c.root).MonitorEnded(id))
		return all && err == nil && string(data) == api.MonitorEndedMark
	}
	conn, err := monitor.Dial(c.root, id)
	if err != nil {
		// Nothing left to kill; a sandbox's root container, signalled
		// over its control socket, or whose sandbox has exited; or
		// gvx-sentry's.
		if ended() || req.Pid == 0 && c.rootKill(id, sig, all) {
			return true, nil
		}
		if req.Pid == 0 {
			return c.rootGoneKill(id)
		}
		return false, nil
	}
	defer conn.Close()
	if _, err := monitor.Send(conn, req); err != nil {
		switch {
		case errors.Is(err, monitor.ErrNotServing):
			return false, nil // not started: gvx-sentry kills a created container
		case errors.Is(err, monitor.ErrGone) && req.Pid == 0:
			return ended(), nil // the container's init exited meanwhile
		case errors.Is(err, monitor.ErrGone):
			// The monitor exits with the task's process: it is gone. (A
			// monitor that answers says api.NotRunning itself when the
			// process or its sandbox is gone.)
			err = fmt.Errorf("%s: %w", api.NotRunning, err)
		}
		return true, fmt.Errorf("kill task %s: %w", id, err)
	}
	return true, nil
}
