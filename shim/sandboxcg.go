package shim

import (
	"context"
	"fmt"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/v2/pkg/oom"
	oomv1 "github.com/containerd/containerd/v2/pkg/oom/v1"
	oomv2 "github.com/containerd/containerd/v2/pkg/oom/v2"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
)

// A container inside a running sandbox (a pod's application container, a
// task in a warm-pool sandbox) has the monitor as its init on the host,
// and the monitor is not in the sandbox's cgroup when containerd's runc
// task service reads the init's cgroup (right after create). gvx reports
// the metrics and OOM events of such containers from the sandbox's cgroup
// itself: exactly the container's for a pool sandbox, the pod's for a pod.

// newOOMWatcher starts an OOM watcher publishing TaskOOM events.
func newOOMWatcher(ctx context.Context, publisher shim.Publisher) (oom.Watcher, error) {
	var w oom.Watcher
	var err error
	if cgroups.Mode() == cgroups.Unified {
		w, err = oomv2.New(publisher)
	} else {
		w, err = oomv1.New(publisher)
	}
	if err != nil {
		return nil, fmt.Errorf("oom watcher: %w", err)
	}
	go w.Run(ctx)
	return w, nil
}

// loadCgroup loads the cgroup at path (v1: every hierarchy; v2: the
// directory).
func loadCgroup(path string) (any, error) {
	if cgroups.Mode() == cgroups.Unified {
		return cgroup2.Load(path)
	}
	return cgroup1.Load(cgroup1.StaticPath(path))
}

// watchSandboxOOM reports OOM events of the sandbox cgroup at path as
// task id's.
func (s *service) watchSandboxOOM(ctx context.Context, id, path string) {
	if s.oom == nil || path == "" {
		return
	}
	cg, err := loadCgroup(path)
	if err == nil {
		err = s.oom.Add(id, cg)
	}
	if err != nil {
		log.G(ctx).WithError(err).Warnf("gvx shim: no OOM events for %s (sandbox cgroup %s)", id, path)
	}
}

// sandboxStats reads the metrics of the sandbox cgroup at path, in the
// form containerd's runc task service answers Stats with.
func sandboxStats(path string) (*task.StatsResponse, error) {
	cg, err := loadCgroup(path)
	if err != nil {
		return nil, fmt.Errorf("sandbox cgroup %s: %w", path, err)
	}
	var stats any
	switch c := cg.(type) {
	case cgroup1.Cgroup:
		if stats, err = c.Stat(cgroup1.IgnoreNotExist); err != nil {
			return nil, err
		}
	case *cgroup2.Manager:
		if stats, err = c.Stat(); err != nil {
			return nil, err
		}
	}
	data, err := typeurl.MarshalAny(stats)
	if err != nil {
		return nil, err
	}
	return &task.StatsResponse{Stats: typeurl.MarshalProto(data)}, nil
}
