package shim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/oci"
	"github.com/gvxrun/gvx/pool"
)

// adoptFile in a bundle records the pool sandbox the task adopted, so that
// cleanup after a crash (Manager.Stop) destroys it too.
const adoptFile = "gvx-pool-sandbox.json"

// CRI annotations by which gvx-sentry (gVisor) tells a container to join
// an existing sandbox.
const (
	containerTypeAnnotation = "io.kubernetes.cri.container-type"
	sandboxIDAnnotation     = "io.kubernetes.cri.sandbox-id"
	poolAnnotation          = "dev.gvx.pool-sandbox"
	// poolExecAnnotation: the task starts as a process in the named
	// sandbox's root container (sentry/exectask.Annotation).
	poolExecAnnotation = "dev.gvx.pool-exec"
)

// poolBlocker says why a task cannot adopt a pool sandbox ("" if it can).
// spec is the task's spec after oci.Prepare and before gvx adds its own
// hook.
func poolBlocker(cfg config.Config, spec *specs.Spec, role string, ext4Rootfs bool) string {
	switch {
	case cfg.Pool.Size <= 0:
		return "pool off"
	case role != "":
		return "CRI pod member (the pod's network namespace is fixed at boot)"
	case ext4Rootfs:
		return "ext4lite root filesystem (its writes go to the image, a setting of the sandbox)"
	case hasHooks(spec):
		return "OCI hooks (they act on the sandbox as it boots)"
	}
	netns := false
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			if ns.Path != "" {
				return "joins network namespace " + ns.Path
			}
			netns = true
		}
	}
	if !netns {
		return "host network"
	}
	if got, want := oci.SandboxResources(spec.Linux.Resources), pool.BootResources(cfg); got != want {
		return fmt.Sprintf("resources %+v differ from the pool's %+v", got, want)
	}
	return ""
}

func hasHooks(s *specs.Spec) bool {
	h := s.Hooks
	return h != nil && len(h.Prestart)+len(h.CreateRuntime)+len(h.CreateContainer)+len(h.StartContainer)+len(h.Poststart)+len(h.Poststop) > 0
}

// adopt claims a pool sandbox for task id and points the spec at it: the
// task becomes a container inside that sandbox. It returns nil (and the
// task boots its own sandbox) when the pool has none to give.
func adopt(ctx context.Context, cfg config.Config, sentry, bundle, id string, spec *specs.Spec, docker bool) *pool.Sandbox {
	// Docker mode is the sandbox's: a docker task needs a docker pool.
	cfg.Docker.Enabled = docker
	sb, err := pool.Claim(ctx, cfg.PoolSocket(), pool.Class(cfg, sentry))
	if err != nil {
		lvl := log.G(ctx).Warnf
		if errors.Is(err, pool.ErrNoSandbox) {
			lvl = log.G(ctx).Infof
		}
		lvl("gvx shim: %s boots its own sandbox: %v", id, err)
		return nil
	}
	if err := sb.Save(filepath.Join(bundle, adoptFile)); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx shim: %s boots its own sandbox", id)
		_ = sb.Destroy(ctx, sentry)
		return nil
	}
	return sb
}

// enterPoolSandbox points the spec at an adopted sandbox: the task becomes
// a container inside it, or, when asProcess, a process started in its root
// container (sentry/exectask).
func enterPoolSandbox(spec *specs.Spec, sb *pool.Sandbox, asProcess bool) {
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	if asProcess {
		spec.Annotations[poolExecAnnotation] = sb.ID
	} else {
		spec.Annotations[containerTypeAnnotation] = "container"
		spec.Annotations[sandboxIDAnnotation] = sb.ID
		// gvx-sentry's delete of the container takes the whole sandbox
		// with it (sentry/subcontainer.PoolAnnotation).
		spec.Annotations[poolAnnotation] = sb.ID
	}
	// The sandbox's cgroup (with the same limits) holds the task.
	spec.Linux.CgroupsPath = ""
}

// processBlocker says why a task that adopted sb must run as a container
// inside it rather than as a process started in its root container ("" if
// it need not): only a sandbox of an image pool, booted on the task's own
// image, whose root container looks like the task's own would, can run it
// as a process.
func processBlocker(spec *specs.Spec, rootfs []*typesMount, sb *pool.Sandbox, volumes, docker bool) string {
	if len(sb.Layers) == 0 {
		return "the pool has no image"
	}
	mounts := make([]mount.Mount, 0, len(rootfs))
	for _, m := range rootfs {
		mounts = append(mounts, mount.Mount{Type: m.Type, Source: m.Source, Options: m.Options})
	}
	if !slices.Equal(pool.Layers(mounts), sb.Layers) {
		return fmt.Sprintf("its image is not the pool's %s", sb.Image)
	}
	switch {
	case spec.Process == nil || spec.Process.Terminal:
		return "it has a terminal"
	case volumes:
		return "it has ext4lite volumes"
	case docker:
		return "docker mode"
	case spec.Hostname != "":
		return "it sets a hostname"
	}
	standard := map[string]string{}
	for _, m := range pool.StandardMounts() {
		standard[m.Destination] = m.Type
	}
	for _, m := range spec.Mounts {
		if t, ok := standard[m.Destination]; !ok || t != m.Type {
			return fmt.Sprintf("it mounts %s (%s)", m.Destination, m.Type)
		}
	}
	return ""
}

// linkPoolRoot makes dir/<ns> (the sentry root containerd's runc shim
// computes for the task) point at the adopted sandbox's root.
func linkPoolRoot(dir, ns string, sb *pool.Sandbox) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("create sentry root: %w", err)
	}
	if err := os.Symlink(sb.Root(), filepath.Join(dir, ns)); err != nil {
		return fmt.Errorf("link pool sandbox root: %w", err)
	}
	return nil
}

// releasePool destroys the adopted sandbox and the task's link to it; the
// record in the bundle goes too once the sandbox is gone, so that the
// cleanup containerd runs after the shim exits has nothing left to do.
func releasePool(ctx context.Context, sentry string, sb *pool.Sandbox, rootDir, bundle string) {
	if sb == nil {
		return
	}
	t0 := time.Now()
	if err := sb.Destroy(ctx, sentry); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx shim: destroy pool sandbox %s", sb.ID)
	} else {
		_ = os.Remove(filepath.Join(bundle, adoptFile))
	}
	log.G(ctx).Debugf("gvx shim: destroyed pool sandbox %s in %s", sb.ID, time.Since(t0))
	if rootDir != "" {
		_ = os.RemoveAll(rootDir)
	}
}
