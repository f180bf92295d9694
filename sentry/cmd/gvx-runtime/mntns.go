package main

import (
	"fmt"
	"os"

	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/volmount"
)

// mountNamespace returns the environment to exec gvx-sentry with for
// argv. A create, run or restore whose spec has volumes or host binds to
// mount in a private mount namespace (volmount.Needed) gets that
// namespace here: this thread enters a new one and the exec hands it to
// gvx-sentry (volmount.UnshareForExec), which then need not re-execute
// itself into one — a start of gvx-sentry (≈ 25–30 ms of CPU on a VM)
// for one of gvx-runtime (≈ 6 ms). The shim points a root container's
// link at gvx-runtime for its create when that may be so
// (shim/sentrybin.go). Anything else, or a failure here, leaves env as
// it is: gvx-sentry decides, and re-executes itself if it must.
func mountNamespace(argv, env []string) []string {
	if volmount.InPrivateNamespace() {
		return env
	}
	dir, ok := volmount.CreateBundle(argv)
	if !ok {
		return env
	}
	spec, err := bundle.ReadSpec(dir)
	if err != nil {
		return env
	}
	if need, err := volmount.Needed(spec); err != nil || !need {
		return env
	}
	out, err := volmount.UnshareForExec(env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gvx-runtime: %v (gvx-sentry makes its own)\n", err)
		return env
	}
	return out
}
