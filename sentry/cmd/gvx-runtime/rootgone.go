package main

import (
	"fmt"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/procfs"
)

// A sandbox's root container whose sandbox has exited — its init ended,
// and the Sentry with it — still gets the `kill --all` containerd's runc
// shim sends once the init exited. gvx-runtime answers it for such a
// container itself, as gvx-sentry would (api.NotRunning), which was a
// gvx-sentry start-up (20–70 ms of CPU on a slow VM). The `delete` that
// follows stays gvx-sentry's: answering it from gVisor's state files alone
// (with the gofer killed and waited for, as gVisor's delete does) left the
// filesystem of a task's volume busy for seconds after the delete now and
// then (TestRolloutCycles' XFS loop device), for a reason not found.

// goneRoot reports whether container id in root is the root container of
// a sandbox whose process has exited.
func goneRoot(root, id string) bool {
	st, ok := readRoot(root, id)
	return ok && !procfs.Alive(st.Sandbox.Pid)
}

// rootGoneKill is kill [--all] of root container id whose sandbox has
// exited: runc's words for it (containerd's runc shim takes them for
// NotFound; after the init's exit it only logs them).
func (c command) rootGoneKill(id string) (bool, error) {
	if !goneRoot(c.root, id) {
		return false, nil
	}
	return true, fmt.Errorf("%s: the sandbox of container %s is gone", api.NotRunning, id)
}
