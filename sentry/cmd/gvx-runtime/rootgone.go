package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/sentry/launcher"
)

// A sandbox's root container whose sandbox has exited — its init ended,
// and the Sentry with it — still gets two runtime calls from the shim:
// the `kill --all` containerd's runc shim sends once the init exited, and
// the `delete`. gvx-runtime answers both for such a container itself
// (each was a gvx-sentry start-up, 20–70 ms of CPU on a slow VM): the kill
// as gvx-sentry would, api.NotRunning; the delete by removing gVisor's
// state and lock files of the container, under its lock, as gVisor's
// delete does last. What gVisor's delete also does — kill the gofer and
// anything else left in the sandbox's cgroup, remove the cgroup and the
// runtime root — the shim's release of the task does right after
// (sandbox.Destroy: it kills what is in the cgroup and waits for it to
// empty). A container with poststop hooks, a disk-backed root filesystem
// overlay (its filestore file) or a sandbox still alive goes to
// gvx-sentry.
//
// (The delete was taken back to gvx-sentry once, on 5 Dec 2026, when it
// coincided with an XFS loop device left attached after TestRolloutCycles;
// that was a fuzz run's test binary re-executing itself in a new mount
// namespace, which copied the test's mount and kept it: see
// testfs.DetachCopies.)

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

// rootGoneDelete is delete [--force] of root container id whose sandbox
// has exited.
func (c command) rootGoneDelete(id string) (bool, error) {
	st, ok := readRoot(c.root, id)
	if !ok || procfs.Alive(st.Sandbox.Pid) || hasPoststop(st) || !memoryOverlay() {
		return false, nil
	}
	state := api.SentryRoot(c.root).SandboxState(id)
	lockPath := lockPathOf(state)
	unlock, err := lockFile(lockPath, 5*time.Second)
	if err != nil {
		return false, nil // gvx-sentry's delete waits for it, or says why
	}
	defer unlock()
	if !goneRoot(c.root, id) {
		return false, nil // changed meanwhile
	}
	for _, p := range []string{state, lockPath} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return true, fmt.Errorf("delete container %s: %w", id, err)
		}
	}
	return true, nil
}

// hasPoststop: gVisor's delete would run the spec's poststop hooks.
func hasPoststop(st *rootState) bool {
	return st.Spec != nil && st.Spec.Hooks != nil && len(st.Spec.Hooks.Poststop) > 0
}

// memoryOverlay: the task's flags (beside its link) keep the root
// filesystem's overlay in memory (gvx's default, rootfs_overlay =
// "memory"), so no filestore file is left for gVisor's delete to remove.
func memoryOverlay() bool {
	flags, err := launcher.Flags(os.Args[0])
	if err != nil {
		return false
	}
	medium := ""
	for _, f := range strings.Fields(flags) {
		if v, ok := strings.CutPrefix(f, "--overlay2="); ok {
			medium = v
		}
	}
	return medium == "root:memory" || medium == "none"
}

// lockFile takes gVisor's lock of a container (flock on its lock file, as
// runsc's state file does), waiting up to wait; unlock releases it.
func lockFile(path string, wait time.Duration) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
