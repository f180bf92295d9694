// Command gvx-sentry is gvx's sandbox launcher: gVisor's runsc command line
// (OCI create/start/exec/kill/delete/state/…, plus the internal gofer and
// boot subcommands it re-executes itself for) with gvx's defaults applied.
//
// gvx additions: the OCI hook netns.LoopbackHook.
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
	"github.com/gvxrun/gvx/sentry/netns"
	"gvisor.dev/gvisor/runsc/cli/maincli"
	"gvisor.dev/gvisor/runsc/version"
)

// version.Version is set by the linker; referencing it keeps it linked.
var _ = version.Version()

func main() {
	if len(os.Args) > 1 && os.Args[1] == netns.LoopbackHook {
		if err := netns.RunLoopbackHook(os.Stdin); err != nil {
			fmt.Fprintf(os.Stderr, "gvx-sentry %s: %v\n", netns.LoopbackHook, err)
			os.Exit(1)
		}
		return
	}
	args, err := launcher.Args(os.Args, os.Getenv(launcher.FlagsEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "gvx-sentry: %v\n", err)
		os.Exit(2)
	}
	os.Args = args
	maincli.Main()
}
