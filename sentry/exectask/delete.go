package exectask

import (
	"context"
	"errors"
	"os"

	"github.com/google/subcommands"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/sandboxctl"
)

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
	if err := record.Remove(conf.RootDir, r.ID); err != nil {
		return util.Errorf("delete task %s: %v", r.ID, err)
	}
	return subcommands.ExitSuccess
}

// processRuns reports whether guest pid still runs in sb.
func processRuns(sb *container.Container, pid int32) bool {
	procs, err := sb.Processes()
	return err == nil && sandboxctl.HasProcess(procs, pid)
}
