package shim

import (
	"context"
	"strings"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sandbox"
)

// enterPodCgroup has gvx-sentry move pool sandbox sb, adopted by a pod's
// sandbox container, from its pool cgroup into the cgroup the pod's spec
// names (cgroupsPath, below the kubelet's pod cgroup), with the limits the
// pool booted it with (api.AnnotationPodCgroup), so that what Kubernetes
// sets on the pod binds it as it binds a pod whose sandbox booted there.
// The task's record and the pool's record of the sandbox name the new
// cgroup before anything moves: a crashed shim's cleanup, or the
// janitor, kills the cgroup it names and the Sentry's pid. A
// systemd-style cgroupsPath (slice:prefix:name) is left alone: the
// sandbox stays in its pool's cgroup, and the shim says so.
func (t *gvxTask) enterPodCgroup(ctx context.Context, sb *sandbox.Sandbox) error {
	to := t.spec.Linux.CgroupsPath
	if to == "" {
		return nil
	}
	if !strings.HasPrefix(to, "/") || strings.Contains(to, ":") {
		log.G(ctx).Infof("gvx shim: %s: pool sandbox %s stays in its pool's cgroup %s (the pod's cgroupsPath %q is not a cgroupfs path)", t.rec.ID, sb.ID, sb.Cgroup, to)
		return nil
	}
	sb.Cgroup = to
	t.rec.SandboxCgroup = to
	if err := t.rec.save(); err != nil {
		return err
	}
	if err := sb.Save(api.SandboxDir(sb.Dir).Record()); err != nil {
		return err
	}
	if t.spec.Annotations == nil {
		t.spec.Annotations = map[string]string{}
	}
	t.spec.Annotations[api.AnnotationPodCgroup] = to
	return nil
}
