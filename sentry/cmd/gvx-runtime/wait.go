package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/hostcreds"
	"github.com/gvxrun/gvx/sentry/monitor"
)

// waitCommand is the waiter's internal subcommand.
const waitCommand = api.RuntimeWaitCommand

// spawnWaiter starts the waiter of exec'd guest process reply.Pid, with a
// connection to the sandbox's control socket opened here (as root) for it;
// it drops to host uid and gid.
func spawnWaiter(root, id string, reply *monitor.Reply, uid, gid int) (*os.Process, error) {
	conn, err := monitor.DialPath(reply.Control)
	if err != nil {
		return nil, fmt.Errorf("sandbox control %w", err)
	}
	ctl, err := conn.File()
	conn.Close()
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	w := exec.Command(self, waitCommand, root, id, strconv.Itoa(int(reply.Pid)), strconv.Itoa(uid), strconv.Itoa(gid))
	w.ExtraFiles = []*os.File{ctl}
	w.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("start waiter: %w", err)
	}
	return w.Process, nil
}

// waitMain is the waiter (gvx-runtime-wait root id pid uid gid, the
// sandbox connection as fd 3): it asks the task's monitor to wait for the
// exec'd process over that connection, drops to the sandbox's host uid,
// forwards the signals it receives to the process and exits with its
// status (api.ExitCode; api.ExitKilled if the monitor goes away first: the
// task's process exited and the sandbox is being torn down).
func waitMain(args []string) int {
	if len(args) != 5 {
		fmt.Fprintf(os.Stderr, "usage: %s root id pid uid gid\n", waitCommand)
		return 2
	}
	root, id := args[0], args[1]
	pid, err1 := strconv.Atoi(args[2])
	uid, err2 := strconv.Atoi(args[3])
	gid, err3 := strconv.Atoi(args[4])
	if err := errors.Join(err1, err2, err3); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", waitCommand, err)
		return 2
	}
	waitConn, err := monitor.Dial(root, id)
	if err != nil {
		return api.ExitKilled
	}
	ctl := os.NewFile(3, "sandbox")
	err = monitor.Write(waitConn, monitor.Request{Op: monitor.OpWait, Pid: int32(pid)}, ctl)
	ctl.Close()
	if err != nil {
		return api.ExitKilled
	}
	sigConn, err := monitor.Dial(root, id)
	if err != nil {
		return api.ExitKilled
	}
	if err := hostcreds.Drop(uid, gid); err != nil {
		fmt.Fprintf(os.Stderr, "%s: keeps its privileges: %v\n", waitCommand, err)
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	go func() {
		for s := range sigs {
			sig, ok := s.(syscall.Signal)
			if !ok || sig == syscall.SIGURG || sig == syscall.SIGCHLD || sig == syscall.SIGPIPE {
				continue // the Go runtime's own, or not for the process
			}
			if _, err := monitor.Send(sigConn, monitor.Request{Op: monitor.OpSignal, Pid: int32(pid), Signal: int(sig)}); err != nil {
				fmt.Fprintf(os.Stderr, "%s: forward signal %d: %v\n", waitCommand, sig, err)
			}
		}
	}()
	reply, err := monitor.Read(waitConn)
	if err != nil {
		return api.ExitKilled
	}
	return api.ExitCode(syscall.WaitStatus(reply.Status))
}
