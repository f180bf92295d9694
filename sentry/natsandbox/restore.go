package natsandbox

import (
	"context"

	"github.com/google/subcommands"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/flag"
	"gvisor.dev/gvisor/runsc/specutils"

	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/bundle"
)

// Restore is runsc's restore (a create from a checkpoint) of a sandbox
// with a NAT. gVisor's save removes the stack's links (its eth0 among
// them) and its restore makes them again from the network arguments the
// restoring sandbox was given before it loads the checkpoint; runsc's
// restore gives a --network=none sandbox lo alone. This one creates the
// sandbox as Create does (published ports bound first, gVisor's create
// with --network=none), starts a new NAT process on a new socketpair, and
// restores with eth0 on it. The guest's TCP connections through the NAT
// at the checkpoint are not carried over (their host sockets were the old
// NAT's): a checkpoint of a sandbox holding one is refused before the
// save (the shim's outside.go, the rollout engine's natQuiet).
type Restore struct {
	cmd.Restore
}

// Execute implements subcommands.Command.
func (r *Restore) Execute(_ context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	if f.NArg() != 1 {
		f.Usage()
		return subcommands.ExitUsageError
	}
	id := f.Arg(0)
	conf := args[0].(*config.Config)
	waitStatus := args[1].(*unix.WaitStatus)
	imagePath := argv.Flag(f, "image-path")
	if imagePath == "" {
		return util.Errorf("image-path flag must be provided")
	}
	dir := bundle.Dir(argv.Flag(f, "bundle"))
	spec, err := specutils.ReadSpec(dir, conf)
	if err != nil {
		return util.Errorf("reading spec: %v", err)
	}
	cfg, listeners, err := listen(conf, id, spec)
	if err != nil {
		return util.Errorf("%v", err)
	}
	ok := false
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
		if !ok {
			RemoveSockets(cfg)
		}
	}()
	detach := argv.Flag(f, "detach") == "true"
	c, err := container.New(conf, container.Args{
		ID:            id,
		Spec:          spec,
		BundleDir:     dir,
		ConsoleSocket: argv.Flag(f, "console-socket"),
		PIDFile:       argv.Flag(f, "pid-file"),
		UserLog:       argv.Flag(f, "user-log"),
		Attached:      !detach,
	})
	if err != nil {
		return util.Errorf("creating container: %v", err)
	}
	guestEnd, natPid, err := startNAT(conf, c, spec, cfg, listeners)
	if err != nil {
		_ = c.Destroy()
		return util.Errorf("container %s: NAT: %v", id, err)
	}
	log.Debugf("Restore %s from %s with the NAT's eth0", id, imagePath)
	err = c.Restore(conf, imagePath, argv.Flag(f, "direct") == "true", argv.Flag(f, "background") == "true", linkArgs(guestEnd))
	guestEnd.Close()
	if err != nil {
		_ = unix.Kill(natPid, unix.SIGKILL)
		_ = c.Destroy()
		return util.Errorf("starting container: %v", err)
	}
	ok = true
	if c.Spec.Process.Terminal {
		stop := c.ForwardSignals(0, true /* fgProcess */)
		defer stop()
	}
	var ws unix.WaitStatus
	if !detach {
		if ws, err = c.Wait(); err != nil {
			return util.Errorf("running container: %v", err)
		}
	}
	*waitStatus = ws
	return subcommands.ExitSuccess
}
