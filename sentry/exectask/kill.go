package exectask

import (
	"context"
	"errors"
	"os"
	"strconv"

	"github.com/google/subcommands"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/monitor"
	"github.com/gvxrun/gvx/sentry/sandboxctl"
)

// Kill signals a task's process (or, with --pid, another process of its
// sandbox), or all processes of its sandbox.
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
	pid := r.Pid
	if p := argv.Flag(f, "pid"); p != "" && p != "0" {
		// A process of the task's other than its own (an exec's, whose
		// guest pid the shim read beside the exec's pid file).
		n, err := strconv.ParseInt(p, 10, 32)
		if err != nil || all {
			return util.Errorf("kill task %s: --pid %q: want one guest pid, without --all", r.ID, p)
		}
		pid = int32(n)
	}
	if all {
		err = sb.SignalContainer(sig, true)
	} else {
		err = sb.SignalProcess(sig, pid)
	}
	if err != nil {
		if all {
			err = sandboxctl.NotRunning(err, sb, 0, nil)
		} else {
			err = sandboxctl.NotRunning(err, sb, pid, sb.Processes)
		}
		return util.Errorf("kill task %s: %v", r.ID, err)
	}
	return subcommands.ExitSuccess
}
