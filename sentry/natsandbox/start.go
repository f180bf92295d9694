package natsandbox

import (
	"context"
	"os"

	"github.com/google/subcommands"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/api"
)

// Has reports whether sandbox id in root was created with a NAT (Create
// left its stats file there).
func Has(root, id string) bool {
	_, err := os.Lstat(api.SentryRoot(root).NATStats(id))
	return err == nil
}

// Start is runsc's start of a NAT sandbox. runsc's start sets the
// sandbox's network up again just before it starts the root container
// (for --network=none: lo only), which would replace the eth0 Create gave
// it; with gVisor's network taken as "host" for this call alone, runsc's
// start leaves the network as Create set it. (The Sentry itself runs
// with --network=none from its create: netstack, not the host's stack.)
type Start struct {
	cmd.Start
}

// Execute implements subcommands.Command.
func (s *Start) Execute(ctx context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	conf := args[0].(*config.Config)
	conf.Network = config.NetworkHost
	return s.Start.Execute(ctx, f, args...)
}
