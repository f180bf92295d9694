package subcontainer

import (
	"context"
	"errors"
	"os"

	"github.com/google/subcommands"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/sandboxctl"
)

// Exists reports whether root holds gVisor's state of container id, and
// the container is one in a running sandbox (not its root container).
func Exists(root, id string) bool {
	c, err := container.Load(root, container.FullID{ContainerID: id}, container.LoadOpts{SkipCheck: true})
	return err == nil && c.Sandbox != nil && c.Spec != nil && IsSubcontainer(c.Spec)
}

// poolSandbox is the warm-pool sandbox a container with spec adopted
// (api.AnnotationPoolSandbox), or "".
func poolSandbox(spec *specs.Spec) string {
	return spec.Annotations[api.AnnotationPoolSandbox]
}

// Delete is runsc's delete of a container inside a running sandbox, except
// in three cases where runsc's does not do what the shim needs:
//
//   - Its sandbox has died (kill -9 of a pool or pod sandbox): runsc takes
//     the container for running while the sandbox process is a zombie not
//     yet reaped by its parent (for a pool sandbox: init), although the
//     container's monitor has reported its exit, and then cannot reach the
//     sandbox. What is left to delete is its state.
//   - It adopted a warm-pool sandbox (api.AnnotationPoolSandbox): the whole
//     sandbox goes with it, in this one call rather than the container's
//     delete and then the sandbox's.
//   - It is stopped or created but not started: runsc's delete asks the
//     sandbox to destroy it, which fails for one that never ran there (a
//     task killed before its start), and the task could not be deleted.
//     Its state goes, as a dead sandbox's container's does.
type Delete struct {
	cmd.Delete
}

// Execute implements subcommands.Command.
func (d *Delete) Execute(ctx context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	if f.NArg() != 1 {
		f.Usage()
		return subcommands.ExitUsageError
	}
	conf := args[0].(*config.Config)
	// The monitor's OOM and end markers and its socket have served once
	// the container exited.
	root := api.SentryRoot(conf.RootDir)
	for _, m := range []string{root.OOMMarker(f.Arg(0)), root.MonitorEnded(f.Arg(0)), root.MonitorSocket(f.Arg(0))} {
		if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Warningf("delete: %v", err)
		}
	}
	id := container.FullID{ContainerID: f.Arg(0)}
	c, err := container.Load(conf.RootDir, id, container.LoadOpts{SkipCheck: true})
	if err != nil {
		return util.Errorf("loading container: %v", err)
	}
	sb, alive := poolSandbox(c.Spec), sandboxctl.Alive(c)
	if alive {
		// runsc's delete for a running container (which it refuses
		// unless forced) and a forced delete of one in a pod. A stopped
		// or created one goes below, whether or not its sandbox runs it:
		// one killed before its start never ran there, and runsc's
		// delete, asking the sandbox to destroy it, fails ("not found")
		// and leaves its task undeletable (as runc, a created container
		// is deleted too). A pool task's goes with its sandbox.
		c.CheckStopped()
		ended := c.Status == container.Stopped || c.Status == container.Created
		forced := argv.Flag(f, "force") == "true"
		if !ended && !forced || sb == "" && forced {
			return d.Delete.Execute(ctx, f, args...)
		}
	}
	if sb != "" && alive {
		root, err := container.Load(conf.RootDir, container.FullID{SandboxID: sb, ContainerID: sb}, container.LoadOpts{SkipCheck: true})
		if err != nil {
			return util.Errorf("loading pool sandbox %s: %v", sb, err)
		}
		if err := root.Destroy(); err != nil {
			return util.Errorf("destroying pool sandbox %s: %v", sb, err)
		}
	}
	if err := c.Destroy(); err != nil {
		// Its sandbox is gone; its state files are gone all the same
		// (checked below).
		log.Warningf("delete %s of a dead sandbox: %v", c.ID, err)
	}
	if _, err := container.Load(conf.RootDir, id, container.LoadOpts{SkipCheck: true}); err == nil {
		return util.Errorf("deleting container %s: its state is still there", c.ID)
	}
	return subcommands.ExitSuccess
}
