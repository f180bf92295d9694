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
	"github.com/gvxrun/gvx/sentry/ctlclient"
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

// directMode is the waiter's last argument when it waits over control
// connections of its own (a sandbox's root container, which has no
// monitor): fd 3 for the wait, fd 4 for the signals it forwards.
const directMode = "direct"

// spawnDirectWaiter starts the waiter of process pid of root container id
// with two control connections, wait and sig, opened here (as root); it
// drops to host uid and gid.
func spawnDirectWaiter(root, id string, pid int32, uid, gid int, wait, sig *ctlclient.Client) (*os.Process, error) {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, c := range []*ctlclient.Client{wait, sig} {
		f, err := c.File()
		if err != nil {
			return nil, fmt.Errorf("waiter's control connection: %w", err)
		}
		files = append(files, f)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	w := exec.Command(self, waitCommand, root, id, strconv.Itoa(int(pid)), strconv.Itoa(uid), strconv.Itoa(gid), directMode)
	w.ExtraFiles = files
	w.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("start waiter: %w", err)
	}
	return w.Process, nil
}

// waitDirect is the waiter of process pid of root container id over the
// control connections it was given: it drops to the sandbox's host uid,
// forwards the signals it receives to the process and exits with its
// status (api.ExitKilled if the sandbox goes away first).
func waitDirect(id string, pid int32, uid, gid int) int {
	wait, err1 := ctlclient.FromFile(os.NewFile(3, "sandbox control"))
	sig, err2 := ctlclient.FromFile(os.NewFile(4, "sandbox control"))
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", waitCommand, err)
		return api.ExitKilled
	}
	if err := hostcreds.Drop(uid, gid); err != nil {
		fmt.Fprintf(os.Stderr, "%s: keeps its privileges: %v\n", waitCommand, err)
	}
	forwardSignals(func(s syscall.Signal) error {
		return sig.Signal(id, pid, int(s), ctlclient.DeliverToProcess)
	})
	status, err := wait.WaitPID(id, pid)
	if err != nil {
		return api.ExitKilled
	}
	return api.ExitCode(syscall.WaitStatus(status))
}

// forwardSignals sends the signals this process receives (but the Go
// runtime's own and SIGCHLD, SIGPIPE) to the process it stands for.
func forwardSignals(send func(syscall.Signal) error) {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	go func() {
		for s := range sigs {
			sig, ok := s.(syscall.Signal)
			if !ok || sig == syscall.SIGURG || sig == syscall.SIGCHLD || sig == syscall.SIGPIPE {
				continue // the Go runtime's own, or not for the process
			}
			if err := send(sig); err != nil {
				fmt.Fprintf(os.Stderr, "%s: forward signal %d: %v\n", waitCommand, sig, err)
			}
		}
	}()
}

// waitMain is the waiter (gvx-runtime-wait root id pid uid gid, the
// sandbox connection as fd 3): it asks the task's monitor to wait for the
// exec'd process over that connection, drops to the sandbox's host uid,
// forwards the signals it receives to the process and exits with its
// status (api.ExitCode; api.ExitKilled if the monitor goes away first: the
// task's process exited and the sandbox is being torn down).
func waitMain(args []string) int {
	if len(args) != 5 && (len(args) != 6 || args[5] != directMode) {
		fmt.Fprintf(os.Stderr, "usage: %s root id pid uid gid [%s]\n", waitCommand, directMode)
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
	if len(args) == 6 {
		return waitDirect(id, int32(pid), uid, gid)
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
	forwardSignals(func(s syscall.Signal) error {
		_, err := monitor.Send(sigConn, monitor.Request{Op: monitor.OpSignal, Pid: int32(pid), Signal: int(s)})
		return err
	})
	reply, err := monitor.Read(waitConn)
	if err != nil {
		return api.ExitKilled
	}
	return api.ExitCode(syscall.WaitStatus(reply.Status))
}
