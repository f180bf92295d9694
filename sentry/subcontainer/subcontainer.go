// Package subcontainer runs a container inside a sandbox that is already
// running (a sandbox of gvx's warm pool) with the process model
// containerd's runc shim expects of a runc-compatible runtime:
//
//   - `create` creates the container in the sandbox and leaves behind a
//     monitor process, whose pid it writes to the pid file: the monitor
//     stands for the container's init on the host (the shim reaps it).
//   - `start` asks the monitor, over a unix socket in the sentry root, to
//     start the container with the stdio `create` was given.
//   - the monitor then drops its privileges, waits for the container and
//     exits with its status (api.ExitCode: 128+n for a death by signal n),
//     which the shim reports as the task's exit.
//
// gVisor's own sub-container commands write the sandbox's pid and take
// stdio at start, so a runc-style shim would neither see the container
// exit nor connect its stdio; this package closes that gap.
package subcontainer

import (
	"bufio"
	"context"
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
	"gvisor.dev/gvisor/runsc/boot"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/flag"
	"gvisor.dev/gvisor/runsc/specutils"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/monitor"
	"github.com/gvxrun/gvx/sentry/sandboxctl"
)

// MonitorCommand is the internal subcommand the monitor runs as.
const MonitorCommand = "gvx-monitor"

// IsSubcontainer reports whether spec describes a container to run inside
// an existing sandbox rather than a sandbox of its own.
func IsSubcontainer(spec *specs.Spec) bool {
	return !specutils.IsRootContainer(spec)
}

// Exists reports whether root holds gVisor's state of container id, and
// the container is one in a running sandbox (not its root container).
func Exists(root, id string) bool {
	c, err := container.Load(root, container.FullID{ContainerID: id}, container.LoadOpts{SkipCheck: true})
	return err == nil && c.Sandbox != nil && c.Spec != nil && IsSubcontainer(c.Spec)
}

// Delete is runsc's delete of a container inside a running sandbox, except
// in two cases where runsc's does not do what the shim needs:
//
//   - Its sandbox has died (kill -9 of a pool or pod sandbox): runsc takes
//     the container for running while the sandbox process is a zombie not
//     yet reaped by its parent (for a pool sandbox: init), although the
//     container's monitor has reported its exit, and then cannot reach the
//     sandbox. What is left to delete is its state.
//   - It adopted a warm-pool sandbox (api.AnnotationPoolSandbox): the whole
//     sandbox goes with it, in this one call rather than the container's
//     delete and then the sandbox's.
type Delete struct {
	cmd.Delete
}

// Execute implements subcommands.Command.
func (d *Delete) Execute(ctx context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	if f.NArg() != 1 {
		f.Usage()
		return subcommands.ExitUsageError
	}
	conf := args[0].(*config.Config)
	id := container.FullID{ContainerID: f.Arg(0)}
	c, err := container.Load(conf.RootDir, id, container.LoadOpts{SkipCheck: true})
	if err != nil {
		return util.Errorf("loading container: %v", err)
	}
	sb, alive := c.Spec.Annotations[api.AnnotationPoolSandbox], sandboxctl.Alive(c)
	if sb == "" && alive {
		// Neither case: runsc's delete.
		return d.Delete.Execute(ctx, f, args...)
	}
	if sb != "" && alive {
		// Like runsc, refuse a running container unless forced.
		if argv.Flag(f, "force") != "true" {
			c.CheckStopped()
			if c.Status != container.Stopped {
				return d.Delete.Execute(ctx, f, args...)
			}
		}
		root, err := container.Load(conf.RootDir, container.FullID{SandboxID: sb, ContainerID: sb}, container.LoadOpts{SkipCheck: true})
		if err != nil {
			return util.Errorf("loading pool sandbox %s: %v", sb, err)
		}
		if err := root.Destroy(); err != nil {
			return util.Errorf("destroying pool sandbox %s: %v", sb, err)
		}
	}
	if err := c.Destroy(); err != nil {
		// Its sandbox is gone; its state files are gone all the same
		// (checked below).
		log.Warningf("delete %s of a dead sandbox: %v", c.ID, err)
	}
	if _, err := container.Load(conf.RootDir, id, container.LoadOpts{SkipCheck: true}); err == nil {
		return util.Errorf("deleting container %s: its state is still there", c.ID)
	}
	return subcommands.ExitSuccess
}

// Create is runsc's create for a sub-container, leaving a monitor behind.
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
	if !IsSubcontainer(spec) {
		return util.Errorf("container %s: gvx-sentry's sub-container create got a spec for a sandbox of its own", id)
	}
	dir := argv.Flag(f, "bundle")
	if dir == "" {
		dir, _ = os.Getwd()
	}
	cont, err := container.New(conf, container.Args{
		ID:            id,
		Spec:          spec,
		BundleDir:     dir,
		ConsoleSocket: argv.Flag(f, "console-socket"),
		UserLog:       argv.Flag(f, "user-log"),
	})
	if err != nil {
		return util.Errorf("creating container: %v", err)
	}
	pid, err := SpawnMonitor(conf.RootDir, id, MonitorCommand, spec.Process != nil && spec.Process.Terminal)
	if err == nil {
		if p := argv.Flag(f, "pid-file"); p != "" {
			err = bundle.WritePidFile(p, pid)
		}
	}
	if err != nil {
		if pid > 0 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		_ = cont.Destroy()
		return util.Errorf("creating container %s: %v", id, err)
	}
	return subcommands.ExitSuccess
}

// SpawnMonitor starts gvx-sentry's internal command (a monitor) for
// container id with this process's stdio and global flags and returns its
// pid (monitor.Spawn).
func SpawnMonitor(root, id, command string, terminal bool) (int, error) {
	m := argv.Self(command, id)
	if !terminal {
		// The container's stdio. With a terminal the container has the
		// pty create set up, and the caller (go-runc) collects create's
		// output through a pipe until EOF: the monitor must not hold it.
		m.Stdin, m.Stdout, m.Stderr = os.Stdin, os.Stdout, os.Stderr
	}
	return monitor.Spawn(m, root, id)
}

// Start asks a sub-container's monitor to start it.
type Start struct {
	cmd.Start
}

// FetchSpec implements util.SubCommand; the monitor holds the container.
func (*Start) FetchSpec(_ *config.Config, f *flag.FlagSet) (string, *specs.Spec, error) {
	return f.Arg(0), nil, nil
}

// Execute implements subcommands.Command.
func (*Start) Execute(_ context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	if f.NArg() != 1 {
		f.Usage()
		return subcommands.ExitUsageError
	}
	conf := args[0].(*config.Config)
	if err := monitor.RequestStart(conf.RootDir, f.Arg(0)); err != nil {
		return util.Errorf("starting container: %v", err)
	}
	return subcommands.ExitSuccess
}

// Monitor is the internal command standing for a sub-container's init.
type Monitor struct {
	util.InternalSubCommand
}

// Name implements subcommands.Command.
func (*Monitor) Name() string { return MonitorCommand }

// Synopsis implements subcommands.Command.
func (*Monitor) Synopsis() string {
	return "internal: stands for a sub-container's init until it exits"
}

// Usage implements subcommands.Command.
func (*Monitor) Usage() string { return MonitorCommand + " <container id>\n" }

// SetFlags implements subcommands.Command.
func (*Monitor) SetFlags(*flag.FlagSet) {}

// Execute implements subcommands.Command. It never returns: the process
// exits with the container's status.
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

	started := false
	for !started {
		ln.SetDeadline(time.Now().Add(200 * time.Millisecond))
		conn, err := ln.Accept()
		if err != nil {
			if !created(conf.RootDir, id) {
				// Killed or deleted before it was started.
				ln.Close()
				os.Remove(sock)
				os.Exit(api.ExitKilled)
			}
			continue
		}
		started = serveStart(conf, c, conn)
	}
	ln.Close()
	os.Remove(sock)
	// Connect while still root (the control socket is root's), then keep
	// only the sandbox's own credentials for the wait.
	conn, err := sandboxctl.Connect(c)
	if err != nil {
		log.Warningf("monitor: %v", err)
		os.Exit(api.ExitKilled)
	}
	sandboxctl.DropPrivileges(c.Spec)
	var ws unix.WaitStatus
	cid := c.ID
	if err := conn.Call(boot.ContMgrWait, &cid, &ws); err != nil {
		log.Warningf("monitor: wait for %s: %v", cid, err)
		os.Exit(api.ExitKilled)
	}
	os.Exit(api.ExitCode(syscall.WaitStatus(ws)))
	return subcommands.ExitSuccess
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

// serveStart answers one request on conn, starting the container when
// asked; it reports whether the container was started.
func serveStart(conf *config.Config, c *container.Container, conn net.Conn) bool {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Minute))
	req, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return false
	}
	if strings.TrimSpace(req) != "start" {
		fmt.Fprintf(conn, "error: unknown request %q\n", strings.TrimSpace(req))
		return false
	}
	// The monitor joined the sandbox's cgroup already (joinSandboxCgroup):
	// hide it from Start, which would join and restore it again (slow on
	// cgroup v1). Only the container's own state file loses it, and no
	// operation on a sub-container uses it (the sandbox's cgroup belongs
	// to the root container's state).
	if conf.IgnoreCgroups {
		c.Sandbox.CgroupJSON.Cgroup = nil
	}
	err = c.Start(conf)
	if err != nil {
		fmt.Fprintf(conn, "error: %v\n", err)
		_ = c.Destroy()
		os.Remove(api.SentryRoot(conf.RootDir).MonitorSocket(c.ID))
		os.Exit(1)
	}
	fmt.Fprintln(conn, "ok")
	return true
}

// created reports whether container id is still waiting to be started.
func created(root, id string) bool {
	c, err := container.Load(root, container.FullID{ContainerID: id}, container.LoadOpts{SkipCheck: true})
	return err == nil && c.Status == container.Created
}
