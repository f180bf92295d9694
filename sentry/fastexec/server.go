package exectask

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

	"github.com/gvxrun/gvx/sentry/fastexec"
	"github.com/gvxrun/gvx/sentry/monitor"
)

// execServer serves the task's execs on the monitor's socket once the task
// runs (monitor.OpExec, OpWait, OpSignal): gvx-runtime's exec then needs no
// gvx-sentry start-up of its own.
type execServer struct {
	sandbox   *container.Container // the sandbox's root container
	cid       string               // its id
	control   string               // the sandbox's control socket
	proc      *specs.Process
	enableRaw bool
	exec      *urpc.Client
	signal    *urpc.Client
}

func (x *execServer) serve(ln *net.UnixListener) {
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		go x.handle(conn)
	}
}

// handle answers the requests on one connection.
func (x *execServer) handle(conn *net.UnixConn) {
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

func (x *execServer) answer(req monitor.Request, files []*os.File) monitor.Reply {
	switch req.Op {
	case monitor.OpExec:
		if len(files) != 3 || req.Process == nil {
			return monitor.Reply{Error: "exec: want a process and three stdio descriptors"}
		}
		e, err := fastexec.ExecArgs(req.Process, x.proc, x.enableRaw)
		if err != nil {
			return monitor.Reply{Error: fmt.Sprintf("exec: %v", err)}
		}
		if e.StdioIsPty {
			return monitor.Reply{Error: "exec: a terminal needs gvx-sentry's exec"}
		}
		e.ContainerID = x.cid
		e.FilePayload = control.NewFilePayload(map[int]*os.File{0: files[0], 1: files[1], 2: files[2]}, nil)
		var pid int32
		if err := x.exec.Call(boot.ContMgrExecuteAsync, e, &pid); err != nil {
			return monitor.Reply{Error: fmt.Sprintf("executing %q in sandbox %s: %v", req.Process.Args, x.cid, err)}
		}
		return monitor.Reply{Pid: pid, Control: x.control}
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
		if err := c.Call(boot.ContMgrWaitPID, &boot.WaitPIDArgs{PID: req.Pid, CID: x.cid}, &status); err != nil {
			return monitor.Reply{Error: fmt.Sprintf("wait for %d: %v", req.Pid, err)}
		}
		return monitor.Reply{Status: status}
	case monitor.OpSignal:
		args := boot.SignalArgs{CID: x.cid, Signo: int32(req.Signal), PID: req.Pid, Mode: boot.DeliverToProcess}
		if err := x.signal.Call(boot.ContMgrSignal, &args, nil); err != nil {
			err = notRunning(err, x.sandbox, req.Pid, x.processes)
			return monitor.Reply{Error: fmt.Sprintf("signal %d to %d: %v", req.Signal, req.Pid, err)}
		}
		return monitor.Reply{}
	}
	return monitor.Reply{Error: fmt.Sprintf("unknown request %q", req.Op)}
}

// processes lists the sandbox's processes over the connection the monitor
// holds (it has no privilege to open another).
func (x *execServer) processes() ([]*control.Process, error) {
	var procs []*control.Process
	cid := x.cid
	if err := x.signal.Call(boot.ContMgrProcesses, &cid, &procs); err != nil {
		return nil, err
	}
	return procs, nil
}
