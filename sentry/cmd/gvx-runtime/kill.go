package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

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
// (rootKill). `kill --pid N` signals one process of a container the same
// two ways (pidKill).
func (c command) kill() (bool, error) {
	args, all := c.args, false
	if len(args) > 0 && (args[0] == "--all" || args[0] == "-all" || args[0] == "-a" || args[0] == "--a") {
		args, all = args[1:], true
	}
	if pid, rest, ok := pidFlag(args); ok && !all {
		return c.pidKill(pid, rest), nil
	}
	id, sig, ok := idSignal(args)
	if !ok {
		return false, nil // other flags, …: gvx-sentry's
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
		if ended() || req.Pid == 0 && c.rootKill(id, 0, sig, all) {
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

// pidFlag parses `--pid N` (or --pid=N) at the front of a kill's
// arguments: the guest pid of one process of the container, what the
// shim sends SIGKILL or SIGSTOP of an exec to (shim/execkill.go).
func pidFlag(args []string) (pid int32, rest []string, ok bool) {
	if len(args) == 0 {
		return 0, nil, false
	}
	var v string
	switch a := strings.TrimPrefix(args[0], "-"); {
	case a == "-pid" || a == "pid":
		if len(args) < 2 {
			return 0, nil, false
		}
		v, rest = args[1], args[2:]
	case strings.HasPrefix(a, "-pid=") || strings.HasPrefix(a, "pid="):
		_, v, _ = strings.Cut(a, "=")
		rest = args[1:]
	default:
		return 0, nil, false
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n <= 0 {
		return 0, nil, false
	}
	return int32(n), rest, true
}

// pidKill is `kill --pid N <id> [signal]`: process N of container id
// signalled by the container's monitor, or, for a sandbox's root
// container, over its control socket. Whatever fails (a task, a process
// or container gone, a signal it does not know) goes to gvx-sentry, which
// says why in runsc's words; so it reports only whether it signalled.
func (c command) pidKill(pid int32, args []string) bool {
	id, sig, ok := idSignal(args)
	if !ok || record.Exists(c.root, id) {
		return false
	}
	if conn, err := monitor.Dial(c.root, id); err == nil {
		defer conn.Close()
		_, err := monitor.Send(conn, monitor.Request{Op: monitor.OpSignal, Signal: int(sig), Pid: pid})
		return err == nil
	}
	return c.rootKill(id, pid, sig, false)
}

// idSignal parses a kill's `<id> [signal]` (SIGTERM by default); ok is
// false for anything else (a flag gvx-runtime does not take, a signal it
// does not know).
func idSignal(args []string) (id string, sig unix.Signal, ok bool) {
	if len(args) == 0 || len(args) > 2 || strings.HasPrefix(args[0], "-") {
		return "", 0, false
	}
	name := "TERM"
	if len(args) == 2 {
		name = args[1]
	}
	sig, err := monitor.ParseSignal(name)
	if err != nil {
		return "", 0, false
	}
	return args[0], sig, true
}
