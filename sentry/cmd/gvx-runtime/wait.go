package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/ctlsock"
	"github.com/gvxrun/gvx/sentry/hostcreds"
	"github.com/gvxrun/gvx/sentry/monitor"
)

// waitCommand is the waiter's internal subcommand.
const waitCommand = api.RuntimeWaitCommand

// spawnWaiter starts the waiter of exec'd guest process reply.Pid with
// two connections to the task's monitor opened here (as root: the
// monitor's socket is root's), the first already asked to wait for the
// process; the waiter runs as host uid and gid from its start
// (hostcreds.Start).
func spawnWaiter(root, id string, reply *monitor.Reply, uid, gid int) (*os.Process, error) {
	var conns []*net.UnixConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 2 {
		c, err := monitor.Dial(root, id)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
	}
	sandbox, err := monitor.DialPath(reply.Control)
	if err != nil {
		return nil, fmt.Errorf("sandbox control %w", err)
	}
	ctl, err := sandbox.File()
	sandbox.Close()
	if err != nil {
		return nil, err
	}
	err = monitor.Write(conns[0], monitor.Request{Op: monitor.OpWait, Pid: reply.Pid}, ctl)
	ctl.Close()
	if err != nil {
		return nil, fmt.Errorf("ask monitor of %s to wait for %d: %w", id, reply.Pid, err)
	}
	return startWaiter(conns, root, id, reply.Pid, uid, gid, monitorMode)
}

// The waiter's last argument: whom its connections (fd 3 for the wait,
// fd 4 for the signals it forwards) go to.
const (
	// monitorMode: the task's monitor (a task adopted from a pool).
	monitorMode = "monitor"
	// directMode: the sandbox's control socket (a sandbox's root
	// container, which has no monitor).
	directMode = "direct"
)

// conn is a connection the waiter inherits.
type conn interface{ File() (*os.File, error) }

// startWaiter starts the waiter of process pid of container id, in mode,
// with conns as its fds 3 and 4, as host uid and gid from its start.
func startWaiter[C conn](conns []C, root, id string, pid int32, uid, gid int, mode string) (*os.Process, error) {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, c := range conns {
		f, err := c.File()
		if err != nil {
			return nil, fmt.Errorf("waiter's connection: %w", err)
		}
		files = append(files, f)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// /proc/self/exe: this very binary, even if an upgrade replaced the
	// file since (the waiter must speak this process's fd and argument
	// layout).
	w := exec.Command("/proc/self/exe", waitCommand, root, id, strconv.Itoa(int(pid)), strconv.Itoa(uid), strconv.Itoa(gid), mode)
	w.Args[0] = self
	w.ExtraFiles = files
	w.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := hostcreds.Start(w, uid, gid); err != nil {
		return nil, fmt.Errorf("start waiter: %w", err)
	}
	return w.Process, nil
}

// spawnDirectWaiter starts the waiter of process pid of root container id
// with two control connections, wait and sig, opened here (as root); it
// runs as host uid and gid from its start.
func spawnDirectWaiter(root, id string, pid int32, uid, gid int, wait, sig *ctlsock.Client) (*os.Process, error) {
	return startWaiter([]*ctlsock.Client{wait, sig}, root, id, pid, uid, gid, directMode)
}

// waitDirect is the waiter of process pid of root container id over the
// control connections it was given: it drops what is left of its
// privileges (hostcreds.Drop: not dumpable), forwards the signals it
// receives to the process and exits with its status (api.ExitKilled if
// the sandbox goes away first).
func waitDirect(id string, pid int32, uid, gid int) int {
	wait, err1 := ctlsock.FromFile(os.NewFile(3, "sandbox control"))
	sig, err2 := ctlsock.FromFile(os.NewFile(4, "sandbox control"))
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", waitCommand, err)
		return api.ExitKilled
	}
	if err := hostcreds.Drop(uid, gid); err != nil {
		fmt.Fprintf(os.Stderr, "%s: keeps its privileges: %v\n", waitCommand, err)
	}
	forwardSignals(func(s syscall.Signal) error {
		return sig.Signal(id, pid, int(s), ctlsock.DeliverToProcess)
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

// waitMain is the waiter (gvx-runtime-wait root id pid uid gid mode, its
// connections as fds 3 and 4): it forwards the signals it receives to the
// process and exits with its status (api.ExitCode; api.ExitKilled if the
// monitor or sandbox goes away first: the task's process exited and the
// sandbox is being torn down).
func waitMain(args []string) int {
	if len(args) != 6 || (args[5] != monitorMode && args[5] != directMode) {
		fmt.Fprintf(os.Stderr, "usage: %s root id pid uid gid %s|%s\n", waitCommand, monitorMode, directMode)
		return 2
	}
	id := args[1]
	pid, err1 := strconv.Atoi(args[2])
	uid, err2 := strconv.Atoi(args[3])
	gid, err3 := strconv.Atoi(args[4])
	if err := errors.Join(err1, err2, err3); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", waitCommand, err)
		return 2
	}
	if args[5] == directMode {
		return waitDirect(id, int32(pid), uid, gid)
	}
	waitConn, err1 := fileConn(3)
	sigConn, err2 := fileConn(4)
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", waitCommand, err)
		return api.ExitKilled
	}
	return waitMonitor(waitConn, sigConn, int32(pid), uid, gid)
}

// waitMonitor is the waiter of exec'd process pid over connections to the
// task's monitor: waitConn, whose wait the monitor answers, and sigConn.
func waitMonitor(waitConn, sigConn *net.UnixConn, pid int32, uid, gid int) int {
	if err := hostcreds.Drop(uid, gid); err != nil {
		fmt.Fprintf(os.Stderr, "%s: keeps its privileges: %v\n", waitCommand, err)
	}
	forwardSignals(func(s syscall.Signal) error {
		_, err := monitor.Send(sigConn, monitor.Request{Op: monitor.OpSignal, Pid: pid, Signal: int(s)})
		return err
	})
	reply, err := monitor.Read(waitConn)
	if err != nil {
		return api.ExitKilled
	}
	return api.ExitCode(syscall.WaitStatus(reply.Status))
}

// fileConn is the unix connection this process inherited as fd.
func fileConn(fd uintptr) (*net.UnixConn, error) {
	c, err := fileConnOf(os.NewFile(fd, "monitor"))
	if err != nil {
		return nil, fmt.Errorf("monitor connection (fd %d): %w", fd, err)
	}
	return c, nil
}

// fileConnOf is the unix connection of f, which it closes.
func fileConnOf(f *os.File) (*net.UnixConn, error) {
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	u, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, errors.New("not a unix socket")
	}
	return u, nil
}
