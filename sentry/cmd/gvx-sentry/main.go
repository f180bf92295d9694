// Command gvx-sentry is gvx's sandbox launcher: gVisor's runsc command line
// (OCI create/start/exec/kill/delete/state/…, plus the internal gofer and
// boot subcommands it re-executes itself for) with gvx's defaults applied.
//
// The containerd shim execs gvx-sentry exactly as it would exec runc. Global
// flags the shim wants for every call arrive in the GVX_SENTRY_FLAGS
// environment variable so that the runc-compatible argument vector stays
// untouched.
package main

import (
	"fmt"
	"os"

	"github.com/gvxrun/gvx/sentry/launcher"
	"gvisor.dev/gvisor/runsc/cli/maincli"
	"gvisor.dev/gvisor/runsc/version"
)

// version.Version is set by the linker; referencing it keeps it linked.
var _ = version.Version()

func main() {
	args, err := launcher.Args(os.Args, os.Getenv(launcher.FlagsEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "gvx-sentry: %v\n", err)
		os.Exit(2)
	}
	os.Args = args
	maincli.Main()
}
