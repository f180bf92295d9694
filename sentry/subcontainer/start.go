package subcontainer

import (
	"context"

	"github.com/google/subcommands"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/sentry/monitor"
)

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
