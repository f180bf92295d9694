package natsandbox

import (
	"context"

	"github.com/google/subcommands"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/natproc"
)

// Serve is the NAT process as gvx-sentry's subcommand (gvx-sentry gvx-nat
// UID GID CONFIG-JSON), for an install without the gvx-nat binary
// (package natproc).
type Serve struct {
	util.InternalSubCommand
}

// Name implements subcommands.Command.
func (*Serve) Name() string { return api.NATCommand }

// Synopsis implements subcommands.Command.
func (*Serve) Synopsis() string { return "internal: a sandbox's userspace NAT" }

// Usage implements subcommands.Command.
func (*Serve) Usage() string { return api.NATCommand + " " + natproc.Usage + "\n" }

// SetFlags implements subcommands.Command.
func (*Serve) SetFlags(*flag.FlagSet) {}

// Execute implements subcommands.Command. It returns when the sandbox's
// process has exited.
func (*Serve) Execute(_ context.Context, f *flag.FlagSet, _ ...any) subcommands.ExitStatus {
	if err := natproc.Run(f.Args()); err != nil {
		return util.Errorf("%v", err)
	}
	return subcommands.ExitSuccess
}
