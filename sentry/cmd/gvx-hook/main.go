// Command gvx-hook is the OCI createRuntime hook of gvx's sandboxes.
//
// The gvx shim puts it first in every sandbox's spec (see package hook). It
// is its own small binary, not a gvx-sentry subcommand, because it runs on
// every sandbox create and gvx-sentry's start-up (gVisor's package
// initialisation) costs several milliseconds.
package main

import (
	"fmt"
	"os"

	"github.com/gvxrun/gvx/sentry/hook"
)

func main() {
	if err := hook.Run(os.Args[1:], os.Stdin); err != nil {
		fmt.Fprintf(os.Stderr, "gvx-hook: %v\n", err)
		os.Exit(1)
	}
}
