package main

import (
	"os"
	"slices"
	"strings"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/natsandbox"
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
