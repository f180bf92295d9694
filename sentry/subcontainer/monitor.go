package subcontainer

import (
	"context"
	"errors"
	"os"
	"syscall"

	"github.com/google/subcommands"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/urpc"
	"gvisor.dev/gvisor/runsc/boot"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/fastexec"
	"github.com/gvxrun/gvx/sentry/monitor"
	"github.com/gvxrun/gvx/sentry/sandboxctl"
)

// MonitorCommand is the internal subcommand the monitor runs as.
const MonitorCommand = "gvx-monitor"

// Monitor is the internal command standing for a sub-container's init.
type Monitor struct {
	util.InternalSubCommand
	// restore: the monitor's start restores the container (Restore).
	restore bool
}

// restoreFlag is the monitor's flag that makes its start a restore.
const restoreFlag = "restore"

// Name implements subcommands.Command.
func (*Monitor) Name() string { return MonitorCommand }

// Synopsis implements subcommands.Command.
func (*Monitor) Synopsis() string {
	return "internal: stands for a sub-container's init until it exits"
}

// Usage implements subcommands.Command.
func (*Monitor) Usage() string { return MonitorCommand + " [--restore] <container id>\n" }

// SetFlags implements subcommands.Command.
func (m *Monitor) SetFlags(f *flag.FlagSet) {
	f.BoolVar(&m.restore, restoreFlag, false, "restore the container at start (a sandbox being restored)")
}

// Execute implements subcommands.Command. It never returns: the process
// exits with the container's status (runMonitor).
func (m *Monitor) Execute(_ context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	conf := args[0].(*config.Config)
	if f.NArg() != 1 {
		f.Usage()
		return subcommands.ExitUsageError
	}
	runMonitor(conf, f.Arg(0), m.restore)
	return subcommands.ExitSuccess
}

// runMonitor stands for container id's init — started (or, if restore,
// restored) once asked on its start socket — until it exits, and exits
// with its status.
func runMonitor(conf *config.Config, id string, restore bool) {
	sock := api.SentryRoot(conf.RootDir).MonitorSocket(id)
	ln, err := monitor.Listener()
	if err != nil {
		log.Warningf("monitor: %v", err)
		os.Remove(sock)
		os.Exit(1)
	}
	// The rest runs while containerd goes on to start the task.
	c, err := container.Load(conf.RootDir, container.FullID{ContainerID: id}, container.LoadOpts{SkipCheck: true})
	if err != nil {
		log.Warningf("monitor: load container %s: %v", id, err)
		os.Remove(sock)
		os.Exit(1)
	}
	joinSandboxCgroup(conf, c)

	exit, err := monitor.ServeStart(ln, func() error { return start(conf, c, restore) }, func() (int, bool) { return waiting(conf.RootDir, id) })
	switch {
	case errors.Is(err, monitor.ErrNotWaiting):
		ln.Close()
		os.Remove(sock)
		os.Exit(exit)
	case err != nil:
		_ = c.Destroy()
		os.Remove(sock)
		os.Exit(1)
	}
	// Connect while still root (the control socket is root's): the wait
	// for the container (which blocks one), and an exec server's two;
	// then keep only the sandbox's own credentials.
	conns, err := sandboxctl.ConnectN(c, 3)
	if err != nil {
		log.Warningf("monitor: %v", err)
		os.Remove(sock)
		os.Exit(api.ExitKilled)
	}
	conn := conns[0]
	oom, err := newOOMWatch(api.SentryRoot(conf.RootDir), c, func() (*urpc.Client, error) { return sandboxctl.Connect(c) })
	if err != nil {
		log.Warningf("monitor: cannot hold %s to its memory limit: %v", id, err)
	}
	// The end marker, empty until the container's init has exited (the
	// monitor cannot create files once it drops its privileges).
	ended, err := os.OpenFile(api.SentryRoot(conf.RootDir).MonitorEnded(id), os.O_CREATE|os.O_TRUNC|os.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		log.Warningf("monitor: %v", err)
	}
	// The socket goes on serving the container's execs (gvx-runtime's
	// exec: no gvx-sentry start-up per exec).
	x := &fastexec.Server{Container: c, Whole: true, Proc: c.Spec.Process, EnableRaw: conf.EnableRaw, Exec: conns[1], Signal: conns[2]}
	x.UID, x.GID = sandboxctl.HostRoot(c.Spec)
	sandboxctl.DropPrivileges(c.Spec)
	go x.Serve(ln)
	if oom != nil {
		go oom.run()
	}
	var ws unix.WaitStatus
	cid := c.ID
	err = conn.Call(boot.ContMgrWait, &cid, &ws)
	ln.Close()
	end(conns[2], cid, ended)
	if err != nil {
		log.Warningf("monitor: wait for %s: %v", cid, err)
		os.Exit(api.ExitKilled)
	}
	os.Exit(api.ExitCode(syscall.WaitStatus(ws)))
}

// end kills what is left of container cid's processes once its init has
// exited (as the end of a container's pid namespace would; runc's shim
// then asks for the same with `kill --all`) and marks the container ended
// in marker (api.SentryRoot.MonitorEnded), so that gvx-runtime answers
// that `kill --all` without a gvx-sentry start-up. (The monitor's socket
// stays, refusing connections, until the container's delete: the monitor
// has no privilege left to remove it.)
func end(sig *urpc.Client, cid string, marker *os.File) {
	all := boot.SignalArgs{CID: cid, Signo: int32(unix.SIGKILL), Mode: boot.DeliverToAllProcesses}
	if err := sig.Call(boot.ContMgrSignal, &all, nil); err != nil {
		log.Debugf("monitor: kill the rest of %s: %v", cid, err)
	}
	if marker == nil {
		return
	}
	if _, err := marker.WriteString(api.MonitorEndedMark); err != nil {
		log.Warningf("monitor: mark %s ended: %v", cid, err)
	}
	marker.Close()
}

// joinSandboxCgroup moves the monitor into its sandbox's cgroups ahead of
// start, so that the container's gofer, which start spawns, is born there
// and start does not pay for joining (slow on cgroup v1).
func joinSandboxCgroup(conf *config.Config, c *container.Container) {
	if conf.IgnoreCgroups || c.Sandbox == nil || c.Sandbox.CgroupJSON.Cgroup == nil {
		return
	}
	if _, err := c.Sandbox.CgroupJSON.Cgroup.Join(); err != nil {
		log.Warningf("monitor: join sandbox cgroup: %v", err)
		return
	}
	conf.IgnoreCgroups = true
}

// start starts container c with the monitor's stdio, or restores it
// into its sandbox being restored.
func start(conf *config.Config, c *container.Container, restore bool) error {
	// The monitor joined the sandbox's cgroup already (joinSandboxCgroup):
	// hide it from Start, which would join and restore it again (slow on
	// cgroup v1). Only the container's own state file loses it, and no
	// operation on a sub-container uses it (the sandbox's cgroup belongs
	// to the root container's state).
	if conf.IgnoreCgroups {
		c.Sandbox.CgroupJSON.Cgroup = nil
	}
	if restore {
		// A sub-container's restore takes no image: the root container's
		// restore read it, and gVisor restores the sandbox now that its
		// last container is here.
		return c.Restore(conf, "", false, false, nil)
	}
	return c.Start(conf)
}

// waiting reports whether container id in root still waits to be started
// (it is created and its sandbox runs); if not (killed or deleted before
// it was started, or its sandbox died: gVisor's state still says created,
// and nothing would ever start it), the status its monitor exits with,
// api.ExitKilled.
func waiting(root, id string) (int, bool) {
	c, err := container.Load(root, container.FullID{ContainerID: id}, container.LoadOpts{SkipCheck: true})
	if err != nil || c.Status != container.Created || !sandboxctl.Alive(c) {
		return api.ExitKilled, false
	}
	return 0, true
}
