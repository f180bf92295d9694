package subcontainer

import (
	"context"

	"github.com/google/subcommands"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/sentry/monitor"
)

// Restore is runsc's restore for a sub-container of a sandbox being
// restored: containerd's runc shim restores a task with one command
// (create and start in one), which here is create, leaving a monitor that
// restores the container instead of starting it, then the monitor's
// start. The sandbox's root container was restored first, from the same
// image (gVisor restores the whole sandbox once its last container is
// given: gvisor's containerManager.RestoreSubcontainer); the image path
// is the root container's business, not this one's.
type Restore struct {
	cmd.Restore
}

// Execute implements subcommands.Command.
func (r *Restore) Execute(_ context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	if f.NArg() != 1 {
		f.Usage()
		return subcommands.ExitUsageError
	}
	conf := args[0].(*config.Config)
	id, spec, err := r.FetchSpec(conf, f)
	if err != nil {
		return util.Errorf("reading spec: %v", err)
	}
	if err := create(conf, f, id, spec, MonitorCommand, "--"+restoreFlag); err != nil {
		return util.Errorf("%v", err)
	}
	if err := monitor.RequestStart(conf.RootDir, id); err != nil {
		return util.Errorf("restoring container %s: %v", id, err)
	}
	return subcommands.ExitSuccess
}
