// Command gvx-sentry is gvx's sandbox launcher, a runc-compatible runsc.
//
// It is gVisor's runsc command line (OCI create/start/exec/kill/delete/
// state/…, plus the internal gofer and boot subcommands it re-executes
// itself for) with gvx's defaults applied.
//
// gvx additions (the createRuntime hook is the separate gvx-hook): ext4lite
// volumes mounted in a private mount namespace before gVisor's create
// (volmount), containers created in a running sandbox with a runc-style
// init process (subcontainer: pod containers, warm-pool adoption), tasks
// started as a process in a running sandbox's root container (exectask:
// image pools), a detached exec that does not pay for two runtime
// start-ups in a row (fastexec), and a kill that says runc's
// api.NotRunning when what it signals is gone (kill.go).
//
// What runs a command line — one of gvx's commands, or runsc's own — is
// one table, by subcommand and kind of task (dispatch.go: table, kindOf).
//
// The containerd shim execs gvx-sentry exactly as it would exec runc.
// Global flags the shim wants for every call of a task sit in a file next
// to the task's link to gvx-sentry (api.FlagsFile), or arrive in the
// environment (api.FlagsEnv), so that the runc-compatible argument vector
// stays untouched.
package main

import (
	"fmt"
	"os"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/version"

	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/launcher"
	"github.com/gvxrun/gvx/sentry/oomwatch"
	"github.com/gvxrun/gvx/sentry/volmount"
)

// version.Version is set by the linker; referencing it keeps it linked.
var _ = version.Version()

func main() {
	if len(os.Args) > 1 && os.Args[1] == oomwatch.WatchCommand {
		if err := oomwatch.Watch(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "gvx-sentry: %v\n", err)
			os.Exit(2)
		}
		return
	}
	if err := mountVolumes(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "gvx-sentry: %v\n", err)
		os.Exit(1)
	}
	flags, err := launcher.Flags(os.Args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "gvx-sentry: %v\n", err)
		os.Exit(2)
	}
	args, err := launcher.Args(os.Args, flags)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gvx-sentry: %v\n", err)
		os.Exit(2)
	}
	dispatch(args)
}

// mountVolumes handles a create/run of a sandbox with ext4lite volumes: the
// first call re-executes gvx-sentry in a private mount namespace (and does
// not return); the re-executed one mounts the volumes there and returns so
// that gVisor's create runs inside that namespace.
func mountVolumes(argv []string) error {
	dir, ok := volmount.CreateBundle(argv)
	if !ok {
		return nil
	}
	spec, err := bundle.ReadSpec(dir)
	if err != nil {
		return nil // gVisor reports a bad bundle itself
	}
	vols, err := volmount.FromSpec(spec)
	if err != nil || len(vols) == 0 {
		return err
	}
	if !volmount.InPrivateNamespace() {
		return volmount.Reexec(argv)
	}
	var uids, gids []specs.LinuxIDMapping
	if spec.Linux != nil {
		uids, gids = spec.Linux.UIDMappings, spec.Linux.GIDMappings
	}
	return volmount.Prepare(vols, uids, gids)
}
