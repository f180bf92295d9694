// Package checkpoint is gvx-sentry's checkpoint: runsc's, speaking runc's
// command line.
//
// containerd's runc shim (whose task service the gvx shim uses) runs
// `checkpoint --image-path P --work-path W [--leave-running]
// [--file-locks] [--tcp-established] …` as it would for runc and CRIU;
// runsc's own checkpoint knows only some of those flags. This command
// takes all of them, saves the sandbox with gVisor's save (state file and
// pages file in P, uncompressed, committed zero pages left out), and
// refuses clearly what gVisor cannot save or what has no meaning here.
// The files of a sandbox's volumes are not its business: the shim copies
// them at the same paused instant (shim/checkpoint.go).
package checkpoint

import (
	"context"
	"fmt"

	"github.com/google/subcommands"
	"gvisor.dev/gvisor/pkg/state/statefile"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/flag"
	"gvisor.dev/gvisor/runsc/sandbox"

	"github.com/gvxrun/gvx/api"
)

// Checkpoint saves a sandbox's state.
type Checkpoint struct {
	cmd.Checkpoint // for FetchSpec; its flags are replaced by SetFlags
	imagePath      string
	leaveRunning   bool
	compression    string
	keepZeros      bool
	direct         bool
	// runc's (CRIU's) flags: accepted; what they ask for is what gVisor
	// does anyway, or is refused.
	workPath, parentPath, pageServer, cgroupsMode, emptyNS    string
	tcpEstablished, extUnixSk, shellJob, fileLocks, lazyPages bool
	statusFD                                                  int
}

// Name implements subcommands.Command.
func (*Checkpoint) Name() string { return "checkpoint" }

// Synopsis implements subcommands.Command.
func (*Checkpoint) Synopsis() string { return "save a sandbox's state (runc-compatible flags)" }

// Usage implements subcommands.Command.
func (*Checkpoint) Usage() string {
	return "checkpoint --image-path <dir> [--leave-running] <container id>\n"
}

// SetFlags implements subcommands.Command.
func (c *Checkpoint) SetFlags(f *flag.FlagSet) {
	f.StringVar(&c.imagePath, "image-path", "", "directory to save the sandbox's state in")
	f.BoolVar(&c.leaveRunning, "leave-running", false, "keep the sandbox running after it is saved")
	f.StringVar(&c.compression, "compression", string(statefile.CompressionLevelNone), "compress the state file: none or flate-best-speed")
	f.BoolVar(&c.keepZeros, "keep-zero-pages", false, "save committed pages that are all zeros too")
	f.BoolVar(&c.direct, "direct", false, "write the pages file with O_DIRECT")
	f.StringVar(&c.workPath, "work-path", "", "ignored (CRIU's work directory)")
	f.StringVar(&c.parentPath, "parent-path", "", "refused: gVisor saves whole sandboxes, not increments of a parent image")
	f.StringVar(&c.pageServer, "page-server", "", "refused: no page server")
	f.StringVar(&c.cgroupsMode, "manage-cgroups-mode", "", "ignored (the sandbox's cgroup is the task's)")
	f.StringVar(&c.emptyNS, "empty-ns", "", "ignored")
	f.BoolVar(&c.tcpEstablished, "tcp-established", false, "accepted: gVisor's network stack saves its connections")
	f.BoolVar(&c.extUnixSk, "ext-unix-sk", false, "accepted")
	f.BoolVar(&c.shellJob, "shell-job", false, "accepted")
	f.BoolVar(&c.fileLocks, "file-locks", false, "accepted: gVisor saves file locks with the sandbox")
	f.BoolVar(&c.lazyPages, "lazy-pages", false, "refused: no lazy page server")
	f.IntVar(&c.statusFD, "status-fd", -1, "ignored")
}

// Execute implements subcommands.Command.
func (c *Checkpoint) Execute(_ context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	if f.NArg() != 1 {
		f.Usage()
		return subcommands.ExitUsageError
	}
	conf := args[0].(*config.Config)
	if err := c.check(conf); err != nil {
		return util.Errorf("checkpoint %s: %v", f.Arg(0), err)
	}
	level, err := statefile.CompressionLevelFromString(c.compression)
	if err != nil {
		return util.Errorf("checkpoint: --compression %q: want none or flate-best-speed", c.compression)
	}
	cont, err := container.Load(conf.RootDir, container.FullID{ContainerID: f.Arg(0)}, container.LoadOpts{})
	if err != nil {
		return util.Errorf("checkpoint: loading container: %v", err)
	}
	opts := sandbox.CheckpointOpts{
		Compression:               level,
		Resume:                    c.leaveRunning,
		Direct:                    c.direct,
		ExcludeCommittedZeroPages: !c.keepZeros,
	}
	if err := cont.Checkpoint(conf, c.imagePath, opts); err != nil {
		return util.Errorf("checkpoint %s: %v", cont.ID, api.ExplainSave(err))
	}
	return subcommands.ExitSuccess
}

// check refuses what cannot be done, naming it.
func (c *Checkpoint) check(conf *config.Config) error {
	switch {
	case c.imagePath == "":
		return fmt.Errorf("--image-path is required")
	case c.parentPath != "":
		return fmt.Errorf("--parent-path %s: gVisor saves a whole sandbox, not an increment over a parent checkpoint", c.parentPath)
	case c.pageServer != "" || c.lazyPages:
		return fmt.Errorf("--page-server and --lazy-pages are CRIU's: gVisor writes its pages to the image directory")
	case conf.Network == config.NetworkHost:
		return fmt.Errorf("the task uses the host's network stack (network=host): its sockets live in the host kernel, which gVisor cannot save; run it with network \"sandbox\" or \"none\"")
	}
	return nil
}
