package fastexec

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/pkg/sentry/control"
	"gvisor.dev/gvisor/pkg/unet"
	"gvisor.dev/gvisor/pkg/urpc"
	"gvisor.dev/gvisor/runsc/boot"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/sentry/monitor"
	"github.com/gvxrun/gvx/sentry/sandboxctl"
)

// Server serves the execs of one container on its monitor's socket once
// the container runs (monitor.OpOwner, OpExec, OpWait, OpSignal):
// gvx-runtime's exec then needs no gvx-sentry start-up of its own. The
// monitor opens Exec and Signal while still root (the control socket is
// root's) and serves after dropping to the sandbox's credentials.
type Server struct {
	// Container is the container the execs run in: the sandbox's root
	// container for a task started as a process in it, or a
	// sub-container.
	Container *container.Container
	// Whole: the container is the task's own (a sub-container), so a
	// signal may address its init (pid 0) or all its processes.
	Whole bool
	// Proc is the container's process: an exec's default capabilities.
	Proc      *specs.Process
	EnableRaw bool
	// UID and GID are the sandbox's host credentials, to which an exec's
	// stdio is handed before the exec (as runsc's exec does).
	UID, GID int
	// Exec and Signal are control connections to the sandbox.
	Exec, Signal *urpc.Client
}

// Serve answers the connections ln accepts until it is closed.
func (x *Server) Serve(ln *net.UnixListener) {
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		go x.handle(conn)
	}
}

// handle answers the requests on one connection.
func (x *Server) handle(conn *net.UnixConn) {
	defer conn.Close()
	r := bufio.NewReader(strings.NewReader("")) // Receive fills it
	for {
		req, files, err := monitor.Receive(conn, r)
		if err != nil {
			return
		}
		reply := x.answer(req, files)
		for _, f := range files {
			f.Close()
		}
		data, _ := json.Marshal(reply)
		if _, err := conn.Write(append(data, '\n')); err != nil {
			return
		}
	}
}

func (x *Server) answer(req monitor.Request, files []*os.File) monitor.Reply {
	switch req.Op {
	case monitor.OpOwner:
		return monitor.Reply{UID: x.UID, GID: x.GID}
	case monitor.OpExec:
		if len(files) != 3 || req.Process == nil {
			return monitor.Reply{Error: "exec: want a process and three stdio descriptors"}
		}
		e, err := ExecArgs(req.Process, x.Proc, x.EnableRaw)
		if err != nil {
			return monitor.Reply{Error: fmt.Sprintf("exec: %v", err)}
		}
		if e.StdioIsPty {
			return monitor.Reply{Error: "exec: a terminal needs gvx-sentry's exec"}
		}
		e.ContainerID = x.Container.ID
		e.FilePayload = control.NewFilePayload(map[int]*os.File{0: files[0], 1: files[1], 2: files[2]}, nil)
		var pid int32
		if err := x.Exec.Call(boot.ContMgrExecuteAsync, e, &pid); err != nil {
			return monitor.Reply{Error: fmt.Sprintf("executing %q in sandbox %s: %v", req.Process.Args, x.Container.ID, err)}
		}
		return monitor.Reply{Pid: pid, Control: x.Container.Sandbox.ControlSocketPath}
	case monitor.OpWait:
		if len(files) != 1 {
			return monitor.Reply{Error: "wait: want the sandbox connection"}
		}
		sock, err := unet.NewSocket(int(files[0].Fd()))
		if err != nil {
			return monitor.Reply{Error: fmt.Sprintf("wait: %v", err)}
		}
		c := urpc.NewClient(sock)
		defer c.Close()
		var status uint32
		if err := c.Call(boot.ContMgrWaitPID, &boot.WaitPIDArgs{PID: req.Pid, CID: x.Container.ID}, &status); err != nil {
			return monitor.Reply{Error: fmt.Sprintf("wait for %d: %v", req.Pid, err)}
		}
		return monitor.Reply{Status: status}
	case monitor.OpSignal:
		args := boot.SignalArgs{CID: x.Container.ID, Signo: int32(req.Signal), PID: req.Pid, Mode: boot.DeliverToProcess}
		switch {
		case (req.Pid == 0 || req.All) && !x.Whole:
			return monitor.Reply{Error: fmt.Sprintf("signal %d: want a process of the task", req.Signal)}
		case req.All:
			args.PID, args.Mode = 0, boot.DeliverToAllProcesses
		}
		if err := x.Signal.Call(boot.ContMgrSignal, &args, nil); err != nil {
			err = sandboxctl.NotRunning(err, x.Container, req.Pid, x.processes)
			return monitor.Reply{Error: fmt.Sprintf("signal %d to %d: %v", req.Signal, req.Pid, err)}
		}
		return monitor.Reply{}
	}
	return monitor.Reply{Error: fmt.Sprintf("unknown request %q", req.Op)}
}

// processes lists the sandbox's processes over the connection the monitor
// holds (it has no privilege to open another).
func (x *Server) processes() ([]*control.Process, error) {
	var procs []*control.Process
	cid := x.Container.ID
	if err := x.Signal.Call(boot.ContMgrProcesses, &cid, &procs); err != nil {
		return nil, err
	}
	return procs, nil
}
