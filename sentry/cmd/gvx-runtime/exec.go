package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/hostcreds"
	"github.com/gvxrun/gvx/sentry/monitor"
)

// exec handles `exec --detach --pid-file P --process F <id>` of a task
// whose monitor serves execs — a task started as a process in a running
// sandbox, or a container in one (a pod's, a warm pool's) once it runs:
// the monitor executes the process (it holds a control connection to the
// sandbox), and a waiter — this program again, ≈ 1 ms to start — stands
// for it on the host; or of a running sandbox's root container, which
// has no monitor (rootExec).
func (c command) exec() (bool, error) {
	flags, ids, ok := subArgs(c.args, map[string]string{"--pid-file": "pid-file", "--process": "process", "--p": "process"},
		map[string]string{"--detach": "detach", "--d": "detach"})
	if !ok || len(ids) != 1 {
		return false, nil // a command line, a console socket, preserved fds, …
	}
	id, pidFile, process, detach := ids[0], flags["pid-file"], flags["process"], flags["detach"] == "true"
	if !detach || pidFile == "" || process == "" {
		return false, nil
	}
	data, err := os.ReadFile(process)
	if err != nil {
		return false, nil
	}
	var p specs.Process
	if err := json.Unmarshal(data, &p); err != nil || p.Terminal {
		return false, nil
	}
	conn, err := monitor.Dial(c.root, id)
	if err != nil {
		// No monitor: a sandbox's root container (over its control
		// socket), or one whose process has exited (gvx-sentry's exec).
		return c.rootExec(id, &p, pidFile)
	}
	defer conn.Close()
	uid, gid, ok := owner(c.root, id, conn)
	if !ok {
		return false, nil // a monitor that does not serve execs (not started yet)
	}
	stdio, err := sandboxStdio(uid, gid)
	if err != nil {
		return true, err
	}
	reply, err := monitor.Send(conn, monitor.Request{Op: monitor.OpExec, Process: &p}, stdio...)
	if err != nil {
		return true, fmt.Errorf("exec in task %s: %w", id, err)
	}
	err = standFor(pidFile, reply.Pid, func() (*os.Process, error) { return spawnWaiter(c.root, id, reply, uid, gid) }, func() {
		_, _ = monitor.Send(conn, monitor.Request{Op: monitor.OpSignal, Pid: reply.Pid, Signal: int(unix.SIGKILL)})
	})
	if err != nil {
		return true, fmt.Errorf("exec in task %s: %w", id, err)
	}
	return true, nil
}

// sandboxStdio hands this process's stdio, which an exec passes to the
// sandbox, to the sandbox's host uid and gid (as runsc's exec does) and
// returns it.
func sandboxStdio(uid, gid int) ([]*os.File, error) {
	stdio := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	for _, f := range stdio {
		if err := f.Chown(uid, gid); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EROFS) {
			return nil, fmt.Errorf("exec: stdio: %w", err)
		}
	}
	return stdio, nil
}

// standFor leaves a waiter (spawn) standing on the host for exec'd guest
// process pid and writes the exec's pid files; if either fails, the
// waiter is killed and so is the process (kill).
func standFor(pidFile string, pid int32, spawn func() (*os.Process, error), kill func()) error {
	waiter, err := spawn()
	if err == nil {
		err = bundle.WriteExecPidFiles(pidFile, pid, waiter.Pid)
	}
	if err != nil {
		if waiter != nil {
			_ = waiter.Kill()
		}
		kill()
		return err
	}
	_ = waiter.Release()
	return nil
}

// owner returns the host uid and gid of task id's sandbox, to which an
// exec's stdio goes: from the spec of a task started as a process (its
// record names the bundle), else asked of the monitor on conn, which
// answers once its container runs (a monitor still waiting for start
// answers no JSON: ok is false).
func owner(root, id string, conn *net.UnixConn) (uid, gid int, ok bool) {
	if r, err := record.Load(root, id); err == nil {
		spec, err := bundle.ReadSpec(r.Bundle)
		if err != nil {
			return 0, 0, false
		}
		uid, gid = hostcreds.HostRoot(spec)
		return uid, gid, true
	}
	reply, err := monitor.Send(conn, monitor.Request{Op: monitor.OpOwner})
	if err != nil {
		return 0, 0, false
	}
	return reply.UID, reply.GID, true
}
