// Command gvx-nat is a sandbox's userspace NAT process (network = "nat").
//
// gvx-sentry's create of a NAT sandbox starts it, beside the sandbox,
// with the files and arguments of package natproc; it is not meant to
// be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/natproc"
)

func main() {
	if err := natproc.Run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", api.NATBinary, err)
		os.Exit(1)
	}
}
