package exectask

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/google/subcommands"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sentry/control"
	"gvisor.dev/gvisor/runsc/boot"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/fastexec"
	"github.com/gvxrun/gvx/sentry/monitor"
	"github.com/gvxrun/gvx/sentry/podjoin"
	"github.com/gvxrun/gvx/sentry/sandboxctl"
)

// MonitorCommand is the internal subcommand the monitor runs as.
const MonitorCommand = record.MonitorCommand

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
	sock := api.SentryRoot(conf.RootDir).MonitorSocket(id)
	ln, err := monitor.Listener()
	if err != nil {
		log.Warningf("exec monitor: %v", err)
		os.Remove(sock)
		os.Exit(1)
	}
	defer os.Remove(sock)
	var pid int32
	var sb *container.Container
	exit, err := monitor.ServeStart(ln, func() (err error) {
		pid, sb, err = start(conf, id)
		return err
	}, func() (int, bool) { return waiting(conf.RootDir, id) })
	switch {
	case errors.Is(err, monitor.ErrNotWaiting):
		os.Exit(exit)
	case err != nil:
		os.Remove(sock)
		os.Exit(api.ExitKilled)
	}
	// Connections opened while still root (the control socket is root's):
	// the wait for the task's process (which blocks one), signals, and the
	// task's execs. Then only the sandbox's own credentials.
	conns, err := sandboxctl.ConnectN(sb, 3)
	if err != nil {
		log.Warningf("exec monitor: %v", err)
		os.Remove(sock)
		os.Exit(api.ExitKilled)
	}
	waitConn, sigConn, execConn := conns[0], conns[1], conns[2]
	x := &fastexec.Server{Container: sb, Proc: sb.Spec.Process, EnableRaw: conf.EnableRaw, Exec: execConn, Signal: sigConn}
	x.UID, x.GID = sandboxctl.HostRoot(sb.Spec)
	if r, err := record.Load(conf.RootDir, id); err == nil {
		if spec, err := bundle.ReadSpec(r.Bundle); err == nil {
			x.Proc = spec.Process // an exec's default capabilities
		}
	}
	sandboxctl.DropPrivileges(sb.Spec)
	go x.Serve(ln)
	code := fastexec.WaitFor(waitConn, sigConn, sb.ID, pid)
	ln.Close()
	os.Remove(sock)
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

// waiting reports whether task id in root still waits to be started; if
// not, the status its monitor exits with: deleted before it was started,
// or its sandbox died (nothing could start it any more), api.ExitKilled;
// killed, the signal's (api.ExitSignaled).
func waiting(root, id string) (int, bool) {
	r, err := record.Load(root, id)
	switch {
	case err != nil:
		return api.ExitKilled, false
	case r.Killed != 0:
		return api.ExitSignaled(syscall.Signal(r.Killed)), false
	}
	if sb, err := sandbox(root, r); err != nil || !sandboxctl.Alive(sb) {
		return api.ExitKilled, false
	}
	return 0, true
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
	if err := joinPod(conf.RootDir, sb, spec); err != nil {
		return 0, nil, fmt.Errorf("start task %s in sandbox %s: %w", id, r.Sandbox, err)
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

// joinPod gives sandbox sb the pod of a CRI pod's sandbox (pause)
// container that adopted it as a process (the shim's choice for every
// pooled pod): the pod's cgroup (api.AnnotationPodCgroup) and the
// interfaces of its network namespace (api.AnnotationPodNetns), before
// the process runs — what a pause container created in the sandbox gets
// at its create (package subcontainer).
func joinPod(rootDir string, sb *container.Container, spec *specs.Spec) error {
	moved := func() error { return nil }
	if to := spec.Annotations[api.AnnotationPodCgroup]; to != "" {
		var err error
		if moved, err = podjoin.EnterCgroup(rootDir, sb.Sandbox.ID, to); err != nil {
			return err
		}
	}
	if ns := spec.Annotations[api.AnnotationPodNetns]; ns != "" {
		if err := podjoin.AttachNetns(sb, ns); err != nil {
			_ = moved()
			return err
		}
	}
	return moved()
}
