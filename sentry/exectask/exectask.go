// Package exectask runs a task as a process started in the root container
// of a sandbox that is already running — a warm-pool sandbox booted on the
// task's image — with the process model containerd's runc shim expects of a
// runc-compatible runtime. No container is created in the sandbox: there is
// no gofer to start and no root filesystem to mount, which is what makes
// adopting such a sandbox cheap.
//
//   - `create` records the task (a JSON file in the sentry root) and leaves
//     a monitor process whose pid is the task's init on the host; it
//     listens on the start socket subcontainer's `start` talks to.
//   - on start the monitor executes the spec's process in the sandbox's
//     root container with create's stdio, records its guest pid, then drops
//     to the sandbox's uid, waits for it and exits with its status.
//   - kill signals that process (or, with --all, every process in the
//     sandbox), saying api.NotRunning when the process or the sandbox is
//     gone; delete destroys the whole sandbox, which was the task's
//     alone; exec, ps, pause, resume, update, state and events are the sandbox root
//     container's, whose id replaces the task's on the command line.
//
// The process is not pid 1 in the sandbox (gvx-pause is), and the
// sandbox's hostname is the pool's.
package exectask

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/google/subcommands"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sentry/control"
	"gvisor.dev/gvisor/pkg/unet"
	"gvisor.dev/gvisor/pkg/urpc"
	"gvisor.dev/gvisor/runsc/boot"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/fastexec"
	"github.com/gvxrun/gvx/sentry/monitor"
	"github.com/gvxrun/gvx/sentry/sandboxctl"
)

// MonitorCommand is the internal subcommand the monitor runs as.
const MonitorCommand = record.MonitorCommand

// sandbox loads the running sandbox (root container) of task r.
func sandbox(root string, r *record.Record) (*container.Container, error) {
	c, err := container.Load(root, container.FullID{SandboxID: r.Sandbox, ContainerID: r.Sandbox}, container.LoadOpts{SkipCheck: true})
	if err != nil {
		return nil, fmt.Errorf("sandbox %s of task %s: %w", r.Sandbox, r.ID, err)
	}
	return c, nil
}

// Rewrite returns command line c with the task it names replaced by the
// task's sandbox (the sandbox's root container), for the commands that act
// on the sandbox on the task's behalf; false if c names no recorded task.
func Rewrite(c argv.Command) ([]string, bool) {
	ids := c.Args()
	if len(ids) == 0 {
		return nil, false
	}
	r, err := record.Load(c.Root, ids[0])
	if err != nil {
		return nil, false
	}
	return c.Retarget(r.Sandbox), true
}

// Create records a task and leaves its monitor behind.
type Create struct {
	cmd.Create
}

// Execute implements subcommands.Command.
func (c *Create) Execute(_ context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	if f.NArg() != 1 {
		f.Usage()
		return subcommands.ExitUsageError
	}
	conf := args[0].(*config.Config)
	id, spec, err := c.FetchSpec(conf, f)
	if err != nil {
		return util.Errorf("reading spec: %v", err)
	}
	if spec.Process == nil || spec.Process.Terminal {
		return util.Errorf("task %s: a process started in a running sandbox needs a process spec without a terminal", id)
	}
	dir := argv.Flag(f, "bundle")
	if dir == "" {
		dir, _ = os.Getwd()
	}
	if !record.IsTask(spec) {
		return util.Errorf("creating task %s: spec has no %s annotation", id, api.AnnotationPoolExec)
	}
	r := &record.Record{ID: id, Sandbox: spec.Annotations[api.AnnotationPoolExec]}
	sb, err := sandbox(conf.RootDir, r)
	if err != nil {
		return util.Errorf("creating task: %v", err)
	}
	if st := sb.Status; st != container.Running {
		return util.Errorf("creating task %s: sandbox %s is %s, not running", id, r.Sandbox, st)
	}
	m := argv.Self(MonitorCommand, id)
	m.Stdin, m.Stdout, m.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := record.Create(conf.RootDir, id, dir, spec, m, argv.Flag(f, "pid-file")); err != nil {
		return util.Errorf("creating task: %v", err)
	}
	return subcommands.ExitSuccess
}

// Monitor is the internal command standing for a task's process.
type Monitor struct {
	util.InternalSubCommand
}

// Name implements subcommands.Command.
func (*Monitor) Name() string { return MonitorCommand }

// Synopsis implements subcommands.Command.
func (*Monitor) Synopsis() string {
	return "internal: starts a task's process in a running sandbox and stands for it until it exits"
}

// Usage implements subcommands.Command.
func (*Monitor) Usage() string { return MonitorCommand + " <task id>\n" }

// SetFlags implements subcommands.Command.
func (*Monitor) SetFlags(*flag.FlagSet) {}

// Execute implements subcommands.Command. It never returns: the process
// exits with the task's status.
func (*Monitor) Execute(_ context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	conf := args[0].(*config.Config)
	if f.NArg() != 1 {
		f.Usage()
		return subcommands.ExitUsageError
	}
	id := f.Arg(0)
	ln, err := monitor.Listener()
	if err != nil {
		log.Warningf("exec monitor: %v", err)
		os.Remove(api.SentryRoot(conf.RootDir).MonitorSocket(id))
		os.Exit(1)
	}
	defer os.Remove(api.SentryRoot(conf.RootDir).MonitorSocket(id))
	var pid int32
	var sb *container.Container
	for pid == 0 {
		ln.SetDeadline(time.Now().Add(200 * time.Millisecond))
		conn, err := ln.Accept()
		if err != nil {
			r, lerr := record.Load(conf.RootDir, id)
			switch {
			case lerr != nil:
				// Deleted before it was started.
				os.Exit(api.ExitKilled)
			case r.Killed != 0:
				os.Exit(api.ExitSignaled(syscall.Signal(r.Killed)))
			}
			continue
		}
		pid, sb = serveStart(conf, id, conn)
	}
	ln.SetDeadline(time.Time{})
	// Connections opened while still root (the control socket is root's):
	// the wait for the task's process (which blocks one), signals, and the
	// task's execs. Then only the sandbox's own credentials.
	var conns [3]*urpc.Client
	for i := range conns {
		if conns[i], err = sandboxctl.Connect(sb); err != nil {
			log.Warningf("exec monitor: %v", err)
			os.Remove(api.SentryRoot(conf.RootDir).MonitorSocket(id))
			os.Exit(api.ExitKilled)
		}
	}
	waitConn, sigConn, execConn := conns[0], conns[1], conns[2]
	x := &execServer{sandbox: sb, cid: sb.ID, control: sb.Sandbox.ControlSocketPath, proc: sb.Spec.Process, enableRaw: conf.EnableRaw, exec: execConn, signal: sigConn}
	if r, err := record.Load(conf.RootDir, id); err == nil {
		if spec, err := bundle.ReadSpec(r.Bundle); err == nil {
			x.proc = spec.Process // an exec's default capabilities
		}
	}
	sandboxctl.DropPrivileges(sb.Spec)
	go x.serve(ln)
	code := fastexec.WaitFor(waitConn, sigConn, sb.ID, pid)
	ln.Close()
	os.Remove(api.SentryRoot(conf.RootDir).MonitorSocket(id))
	// The sandbox was the task's alone: with its process gone, end it
	// (gvx-pause and any exec still running, as a container's pid
	// namespace ends with its init) so that it is torn down while
	// containerd reports the exit, not when the task is deleted.
	all := boot.SignalArgs{CID: sb.ID, Signo: int32(unix.SIGKILL), Mode: boot.DeliverToAllProcesses}
	if err := sigConn.Call(boot.ContMgrSignal, &all, nil); err != nil {
		log.Debugf("exec monitor: end sandbox %s: %v", sb.ID, err)
	}
	os.Exit(code)
	return subcommands.ExitSuccess
}

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

// serveStart answers one request on conn, starting the task's process when
// asked; it returns its guest pid and its sandbox (0, nil if not started).
func serveStart(conf *config.Config, id string, conn net.Conn) (int32, *container.Container) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Minute))
	req, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return 0, nil
	}
	if strings.TrimSpace(req) != "start" {
		fmt.Fprintf(conn, "error: unknown request %q\n", strings.TrimSpace(req))
		return 0, nil
	}
	pid, sb, err := start(conf, id)
	if err != nil {
		fmt.Fprintf(conn, "error: %v\n", err)
		os.Remove(api.SentryRoot(conf.RootDir).MonitorSocket(id))
		os.Exit(api.ExitKilled)
	}
	fmt.Fprintln(conn, "ok")
	return pid, sb
}

// start executes the task's process in its sandbox with the monitor's
// stdio and records its guest pid.
func start(conf *config.Config, id string) (int32, *container.Container, error) {
	r, err := record.Load(conf.RootDir, id)
	if err != nil {
		return 0, nil, fmt.Errorf("task %s: %w", id, err)
	}
	if r.Pid != 0 {
		return 0, nil, fmt.Errorf("task %s already started", id)
	}
	spec, err := bundle.ReadSpec(r.Bundle)
	if err != nil {
		return 0, nil, err
	}
	sb, err := sandbox(conf.RootDir, r)
	if err != nil {
		return 0, nil, err
	}
	e, err := fastexec.ExecArgs(spec.Process, nil, conf.EnableRaw)
	if err != nil {
		return 0, nil, fmt.Errorf("task %s: process: %w", id, err)
	}
	e.FilePayload = control.NewFilePayload(map[int]*os.File{0: os.Stdin, 1: os.Stdout, 2: os.Stderr}, nil)
	pid, err := sb.Execute(conf, e)
	if err != nil {
		return 0, nil, fmt.Errorf("start task %s in sandbox %s: %w", id, r.Sandbox, err)
	}
	r.Pid = pid
	if err := r.Save(conf.RootDir); err != nil {
		_ = sb.SignalProcess(unix.SIGKILL, pid)
		return 0, nil, err
	}
	return pid, sb, nil
}

// Kill signals a task's process, or all processes of its sandbox.
type Kill struct {
	cmd.Kill
}

// FetchSpec implements util.SubCommand; the task is not a gVisor container.
func (*Kill) FetchSpec(_ *config.Config, f *flag.FlagSet) (string, *specs.Spec, error) {
	return f.Arg(0), nil, nil
}

// Execute implements subcommands.Command.
func (k *Kill) Execute(_ context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	conf := args[0].(*config.Config)
	if f.NArg() == 0 || f.NArg() > 2 {
		f.Usage()
		return subcommands.ExitUsageError
	}
	r, err := record.Load(conf.RootDir, f.Arg(0))
	if err != nil {
		return util.Errorf("loading task: %v", err)
	}
	name := "TERM"
	if f.NArg() == 2 {
		name = f.Arg(1)
	}
	sig, err := monitor.ParseSignal(name)
	if err != nil {
		return util.Errorf("%v", err)
	}
	if r.Pid == 0 {
		// Not started: the monitor exits as if the process had died of sig.
		r.Killed = int(sig)
		if err := r.Save(conf.RootDir); err != nil {
			return util.Errorf("kill task %s: %v", r.ID, err)
		}
		return subcommands.ExitSuccess
	}
	sb, err := sandbox(conf.RootDir, r)
	if errors.Is(err, os.ErrNotExist) {
		return util.Errorf("kill task %s: %s: %v", r.ID, api.NotRunning, err)
	}
	if err != nil {
		return util.Errorf("kill: %v", err)
	}
	all := argv.Flag(f, "all") == "true"
	if all {
		err = sb.SignalContainer(sig, true)
	} else {
		err = sb.SignalProcess(sig, r.Pid)
	}
	if err != nil {
		if all {
			err = notRunning(err, sb, 0, nil)
		} else {
			err = notRunning(err, sb, r.Pid, sb.Processes)
		}
		return util.Errorf("kill task %s: %v", r.ID, err)
	}
	return subcommands.ExitSuccess
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

// Delete destroys a task's sandbox (the task's alone) and its record.
type Delete struct {
	cmd.Delete
}

// FetchSpec implements util.SubCommand; the task is not a gVisor container.
func (*Delete) FetchSpec(_ *config.Config, f *flag.FlagSet) (string, *specs.Spec, error) {
	return f.Arg(0), nil, nil
}

// Execute implements subcommands.Command.
func (d *Delete) Execute(_ context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	conf := args[0].(*config.Config)
	if f.NArg() != 1 {
		f.Usage()
		return subcommands.ExitUsageError
	}
	r, err := record.Load(conf.RootDir, f.Arg(0))
	if err != nil {
		return util.Errorf("loading task: %v", err)
	}
	sb, err := sandbox(conf.RootDir, r)
	switch {
	case errors.Is(err, os.ErrNotExist):
		// The sandbox is gone already.
	case err != nil:
		return util.Errorf("delete: %v", err)
	default:
		if argv.Flag(f, "force") != "true" && r.Pid != 0 && processRuns(sb, r.Pid) {
			return util.Errorf("cannot delete task %s: its process is running (use --force)", r.ID)
		}
		if err := sb.Destroy(); err != nil {
			return util.Errorf("destroying sandbox %s of task %s: %v", r.Sandbox, r.ID, err)
		}
	}
	os.Remove(api.SentryRoot(conf.RootDir).MonitorSocket(r.ID))
	if err := os.Remove(api.SentryRoot(conf.RootDir).TaskRecord(r.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return util.Errorf("delete task %s: %v", r.ID, err)
	}
	return subcommands.ExitSuccess
}

// processRuns reports whether guest pid still runs in sb.
func processRuns(sb *container.Container, pid int32) bool {
	procs, err := sb.Processes()
	return err == nil && hasProcess(procs, pid)
}
