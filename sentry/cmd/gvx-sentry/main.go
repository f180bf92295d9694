// Command gvx-sentry is gvx's sandbox launcher: gVisor's runsc command line
// (OCI create/start/exec/kill/delete/state/…, plus the internal gofer and
// boot subcommands it re-executes itself for) with gvx's defaults applied.
//
// gvx additions (the createRuntime hook is the separate gvx-hook): ext4lite volumes
// mounted in a private mount namespace before gVisor's create (volmount),
// containers created in a running sandbox with a runc-style init process
// (subcontainer: pod containers, warm-pool adoption), and a detached exec
// that does not pay for two runtime start-ups in a row (fastexec).
//
// The containerd shim execs gvx-sentry exactly as it would exec runc. Global
// flags the shim wants for every call of a task sit in a file next to the
// task's link to gvx-sentry (api.FlagsFile), or arrive in the environment
// (api.FlagsEnv), so that the runc-compatible argument vector stays
// untouched.
package main

import (
	"fmt"
	"os"

	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/compat"
	"github.com/gvxrun/gvx/sentry/exectask"
	"github.com/gvxrun/gvx/sentry/fastexec"
	"github.com/gvxrun/gvx/sentry/launcher"
	"github.com/gvxrun/gvx/sentry/subcontainer"
	"github.com/gvxrun/gvx/sentry/volmount"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/cli"
	"gvisor.dev/gvisor/runsc/cli/maincli"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/version"
)

// version.Version is set by the linker; referencing it keeps it linked.
var _ = version.Version()

func main() {
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
	c, ok := argv.Parse(args)
	if ok {
		// A task started as a process in a running sandbox: commands that
		// act on the sandbox on its behalf get the sandbox's id.
		if rewritten, isTask := exectask.Rewrite(c); isTask {
			args = rewritten
			c, ok = argv.Parse(args)
		}
	}
	os.Args = args
	var own []util.SubCommand
	switch {
	case !ok:
	case exectask.Handles(c):
		// gvx's own commands for tasks started as a process in a running
		// sandbox (an image's warm pool).
		own = exectask.Commands()
	case c.Sub == "kill":
		// runsc's kill, saying api.NotRunning when the container or its
		// sandbox is gone.
		own = []util.SubCommand{new(Kill)}
	case subcontainer.Handles(c) || fastexec.Handles(c):
		// gvx's own commands: create and start of a container in a
		// running sandbox (pods, the warm pool), and exec.
		own = append(subcontainer.Commands(), fastexec.Commands()...)
	}
	if own != nil {
		cmds := map[util.SubCommand]string{}
		for _, c := range own {
			cmds[c] = ""
		}
		cli.Run(nil, cmds, nil)
		return
	}
	if ok && c.Sub == "boot" {
		// The Sentry runs in this process.
		compat.Install()
	}
	maincli.Main()
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
