// Package cgroups removes the cgroups gvx's sandboxes leave behind.
package cgroups

import (
	"context"
	"errors"
	"os"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/containerd/log"
)

// Remove deletes the cgroup at path (every v1 hierarchy, or the v2
// directory) once its sandbox is gone. gVisor removes it on a normal
// delete, but not when sandbox start-up fails or the sandbox is killed
// from outside; this makes teardown leave nothing behind either way. A
// cgroup that still has processes is left alone (and logged).
func Remove(ctx context.Context, path string) {
	if path == "" {
		return
	}
	var err error
	if cgroups.Mode() == cgroups.Unified {
		var m *cgroup2.Manager
		if m, err = cgroup2.Load(path); err == nil {
			err = m.Delete()
		}
	} else {
		var cg cgroup1.Cgroup
		if cg, err = cgroup1.Load(cgroup1.StaticPath(path)); err == nil {
			err = cg.Delete()
		}
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, cgroup1.ErrCgroupDeleted) {
		log.G(ctx).WithError(err).Debugf("gvx: remove cgroup %s", path)
	}
}
