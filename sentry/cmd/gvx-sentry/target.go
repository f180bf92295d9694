package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/natsandbox"
	"github.com/gvxrun/gvx/sentry/volmount"
)

// isTarget says whether container id of sentry root root is a restore
// target (api.AnnotationRestoreTarget) the shim has named a checkpoint
// for.
func isTarget(root, id string) bool {
	_, err := os.Lstat(api.SentryRoot(root).RestoreTarget(id))
	return err == nil
}

// targetRestore turns start command line c of a restore target into
// gVisor's restore, detached, of the image the shim named
// (api.SentryRoot.RestoreTarget) into the container the target's create
// made: runsc's restore loads a created container and restores into its
// sandbox, already booted, where a restore on demand would create and
// boot one first.
func targetRestore(c argv.Command) ([]string, bool) {
	ids := c.Args()
	if len(ids) != 1 {
		return nil, false
	}
	data, err := os.ReadFile(api.SentryRoot(c.Root).RestoreTarget(ids[0]))
	if err != nil {
		return nil, false
	}
	image := strings.TrimSpace(string(data))
	if image == "" {
		return nil, false
	}
	globals := slices.Clone(c.Globals)
	if natsandbox.Has(c.Root, ids[0]) {
		// A NAT sandbox's eth0 is the one its create gave it, on the NAT
		// process the create started: with gVisor's network taken as
		// "host" for this call alone, runsc's restore sets no network
		// up and the restored stack gets that eth0 (the last --network
		// is the one runsc takes; natsandbox.Start does the same).
		globals = append(globals, "--network=host")
	}
	return append(globals, "restore", "--detach", "--image-path="+image, ids[0]), true
}

// targetSetup runs before gVisor's restore into a restore target:
// watchRestore, and the target's volumes mounted (mountTargetVolumes).
func targetSetup() {
	watchRestore()
	if err := mountTargetVolumes(os.Args); err != nil {
		util.Fatalf("%v", err)
	}
}

// mountTargetVolumes mounts the ext4lite volumes the shim listed for the
// restore target that restore command line args restores into
// (api.SentryRoot.RestoreTargetVolumes: the checkpoint's copies, checked)
// inside the target's gofer, at their destinations, before the restore
// has the Sentry ask the gofer for them. A target without volumes has no
// list.
func mountTargetVolumes(args []string) error {
	c, ok := argv.Parse(args)
	if !ok || len(c.Args()) != 1 {
		return nil
	}
	id := c.Args()[0]
	vols, err := api.ReadVolumes(api.SentryRoot(c.Root).RestoreTargetVolumes(id))
	if err != nil || len(vols) == 0 {
		return err
	}
	cont, err := container.Load(c.Root, container.FullID{ContainerID: id}, container.LoadOpts{SkipCheck: true})
	if err != nil {
		return fmt.Errorf("restore target %s: %w", id, err)
	}
	gofer := cont.GoferPid.Load()
	if gofer <= 0 {
		return fmt.Errorf("restore target %s: its gofer is gone; its volumes cannot be mounted", id)
	}
	if err := volmount.MountInto(gofer, vols); err != nil {
		return fmt.Errorf("restore target %s: %w", id, err)
	}
	return nil
}
