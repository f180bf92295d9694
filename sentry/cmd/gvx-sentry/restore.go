package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gvisor.dev/gvisor/runsc/cmd/util"

	"github.com/gvxrun/gvx/sentry/argv"
)

// restoreTimeout bounds a restore. gVisor's loads the kernel's objects and
// starts loading memory in the background; a restore that has not
// finished after this long waits on something that will not come (one
// seen: sockets saved in an inner network namespace, whose endpoints
// gVisor never restores, docs/checkpoint.md).
var restoreTimeout = 5 * time.Minute

// watchRestore ends this detached restore (containerd's: the command
// returns once the sandbox runs; one without --detach lasts as long as
// the container and is left alone) if it has not finished within
// restoreTimeout: it kills the sandbox and gofer processes the restore
// started (its children) and fails with an error that says so, which the
// task's runtime log carries to the caller; the caller's delete then
// releases the rest, as after any failed restore.
func watchRestore() {
	if c, ok := argv.Parse(os.Args); !ok || c.SubFlag("detach") != "true" {
		return
	}
	time.AfterFunc(restoreTimeout, func() {
		killChildren()
		util.Fatalf("restore did not finish within %s: gVisor's restore waits on something that will not come (e.g. TCP sockets saved in an inner container's network namespace, which gVisor does not restore); "+
			"its sandbox was killed. Take the checkpoint again without them (docs/checkpoint.md)", restoreTimeout)
	})
}

// killChildren sends SIGKILL to every child of this process.
func killChildren() {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(field); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}
