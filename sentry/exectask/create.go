package exectask

import (
	"context"
	"os"

	"github.com/google/subcommands"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/exectask/record"
)

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
	dir := bundle.Dir(argv.Flag(f, "bundle"))
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
