package subcontainer

import (
	"context"
	"fmt"
	"os"

	"github.com/google/subcommands"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
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
	"github.com/gvxrun/gvx/sentry/podjoin"
)

// IsSubcontainer reports whether spec describes a container to run inside
// an existing sandbox rather than a sandbox of its own.
func IsSubcontainer(spec *specs.Spec) bool {
	return !specutils.IsRootContainer(spec)
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
	here := os.Getenv(monitor.CreateHereEnv) != ""
	if here {
		os.Unsetenv(monitor.CreateHereEnv) // not the gofer's business
	}
	id, spec, err := c.FetchSpec(conf, f)
	if err == nil && here {
		createHere(conf, f, id, spec) // returns only if the create failed
		return subcommands.ExitFailure
	}
	if err != nil {
		return util.Errorf("reading spec: %v", err)
	}
	if err := create(conf, f, id, spec, MonitorCommand); err != nil {
		return util.Errorf("%v", err)
	}
	return subcommands.ExitSuccess
}

// create creates sub-container id (spec) with the create or restore
// command line's flags f and leaves behind its monitor, run as
// monitorArgs.
func create(conf *config.Config, f *flag.FlagSet, id string, spec *specs.Spec, monitorArgs ...string) error {
	cont, err := newContainer(conf, f, id, spec)
	if err != nil {
		return err
	}
	pid, err := SpawnMonitor(conf.RootDir, id, spec.Process != nil && spec.Process.Terminal, monitorArgs...)
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
		return fmt.Errorf("creating container %s: %v", id, err)
	}
	return nil
}

// createHere is the create gvx-runtime started as the container's monitor
// (monitor.SpawnCreate): it creates the container, reports, and goes on
// as its monitor. It returns only when the create failed (reported, and
// written to the log).
func createHere(conf *config.Config, f *flag.FlagSet, id string, spec *specs.Spec) {
	cont, err := newContainer(conf, f, id, spec)
	if err == nil {
		if p := argv.Flag(f, "pid-file"); p != "" {
			if err = bundle.WritePidFile(p, os.Getpid()); err != nil {
				err = fmt.Errorf("creating container %s: %v", id, err)
			}
		}
	}
	if err != nil {
		// Undone before the report: once gvx-runtime has it, the shim
		// may create the same id again.
		if cont != nil {
			_ = cont.Destroy()
		}
		os.Remove(api.SentryRoot(conf.RootDir).MonitorSocket(id))
		_ = monitor.Report(err)
		util.Errorf("%v", err)
		return
	}
	if err := monitor.Report(nil); err != nil {
		// gvx-runtime is gone (killed with the shim's create): the
		// container goes; its socket stays, which may already be a
		// later create's (the next create of the id replaces it).
		_ = cont.Destroy()
		util.Errorf("creating container %s: abandoned: %v", id, err)
		return
	}
	runMonitor(conf, id, false) // never returns
}

// newContainer creates sub-container id (spec), with the create or
// restore command line's flags f, in its running sandbox.
func newContainer(conf *config.Config, f *flag.FlagSet, id string, spec *specs.Spec) (*container.Container, error) {
	if !IsSubcontainer(spec) {
		return nil, fmt.Errorf("container %s: gvx-sentry's sub-container %s got a spec for a sandbox of its own", id, f.Name())
	}
	var err error
	moved := func() error { return nil }
	if to := spec.Annotations[api.AnnotationPodCgroup]; to != "" {
		sbID, ok := specutils.SandboxID(spec)
		if !ok {
			return nil, fmt.Errorf("creating container %s: pod cgroup %s for a spec that names no sandbox to join", id, to)
		}
		if moved, err = podjoin.EnterCgroup(conf.RootDir, sbID, to); err != nil {
			return nil, fmt.Errorf("creating container %s: %v", id, err)
		}
	}
	// An end marker of an earlier container of this id (its delete never
	// came) would answer this one's `kill --all`.
	if err := os.Remove(api.SentryRoot(conf.RootDir).MonitorEnded(id)); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("creating container %s: %v", id, err)
	}
	dir := bundle.Dir(argv.Flag(f, "bundle"))
	cont, err := container.New(conf, container.Args{
		ID:            id,
		Spec:          spec,
		BundleDir:     dir,
		ConsoleSocket: argv.Flag(f, "console-socket"),
		UserLog:       argv.Flag(f, "user-log"),
	})
	if err != nil {
		_ = moved()
		return nil, fmt.Errorf("creating container: %v", err)
	}
	if ns := spec.Annotations[api.AnnotationPodNetns]; ns != "" {
		if err := podjoin.AttachNetns(cont, ns); err != nil {
			_ = moved()
			_ = cont.Destroy()
			return nil, fmt.Errorf("creating container %s: %v", id, err)
		}
	}
	// The monitor joins the sandbox's cgroup, which the move empties.
	if err := moved(); err != nil {
		_ = cont.Destroy()
		return nil, fmt.Errorf("creating container %s: %v", id, err)
	}
	return cont, nil
}

// SpawnMonitor starts gvx-sentry's internal command (a monitor: command
// and its flags, then id) for container id with this process's stdio and
// global flags and returns its pid (monitor.Spawn).
func SpawnMonitor(root, id string, terminal bool, command ...string) (int, error) {
	m := argv.Self(append(command, id)...)
	if !terminal {
		// The container's stdio. With a terminal the container has the
		// pty create set up, and the caller (go-runc) collects create's
		// output through a pipe until EOF: the monitor must not hold it.
		m.Stdin, m.Stdout, m.Stderr = os.Stdin, os.Stdout, os.Stderr
	}
	return monitor.Spawn(m, root, id)
}
