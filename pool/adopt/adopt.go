// Package adopt decides whether a task may adopt a warm-pool sandbox, and
// how it runs in one.
//
// A task adopts a sandbox only if the pool booted it the way the task's
// own would be (its class, package bootspec) and the task needs nothing
// fixed at boot that the pool could not know (Blocker). In an image
// pool's sandbox, a task that looks like the sandbox's root container
// (same image layers, containerd's default mounts, no terminal, …) starts
// as a process in that root container; any other runs as a container
// inside the sandbox (ProcessBlocker).
package adopt

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/core/mount"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/oci"
	"github.com/gvxrun/gvx/pool/bootspec"
	"github.com/gvxrun/gvx/sandbox"
)

// Blocker says why a task cannot adopt a pool sandbox ("" if it can).
// spec is the task's spec after oci.Prepare and before gvx adds its own
// hook; role is its CRI pod role and ext4Rootfs whether its root
// filesystem is an ext4lite image. A pod's sandbox (pause) container may
// adopt one although it joins the pod's network namespace: gvx-sentry
// gives the running sandbox that namespace's interfaces
// (api.AnnotationPodNetns); the pod's application containers then run in
// the sandbox it adopted.
func Blocker(cfg config.Config, spec *specs.Spec, role string, ext4Rootfs bool) string {
	switch {
	case cfg.Pool.Size <= 0:
		return "pool off"
	case role == oci.RoleContainer:
		return "a CRI pod's application container (it runs in its pod's sandbox)"
	case ext4Rootfs:
		return "ext4lite root filesystem (its writes go to the image, a setting of the sandbox)"
	case hasHooks(spec):
		return "OCI hooks (they act on the sandbox as it boots)"
	}
	netns := false
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			if ns.Path != "" && role != oci.RolePause {
				return "joins network namespace " + ns.Path
			}
			netns = true
		}
	}
	if !netns {
		return "host network"
	}
	got := oci.SandboxResources(spec.Linux.Resources)
	if role == oci.RolePause && got.CPUShares == criSandboxShares {
		// What CRI gives every pod's sandbox container, not the pod's
		// request: the adopted sandbox keeps the pool's weight.
		got.CPUShares = 0
	}
	if want := bootspec.Resources(cfg); got != want {
		return fmt.Sprintf("resources %+v differ from the pool's %+v", got, want)
	}
	return ""
}

// criSandboxShares is the CPU weight containerd's CRI gives every pod's
// sandbox (pause) container, whatever the pod requests.
const criSandboxShares = 2

func hasHooks(s *specs.Spec) bool {
	h := s.Hooks
	return h != nil && len(h.Prestart)+len(h.CreateRuntime)+len(h.CreateContainer)+len(h.StartContainer)+len(h.Poststart)+len(h.Poststop) > 0
}

// ProcessBlocker says why a task that adopted sb must run as a container
// inside it rather than as a process started in its root container ("" if
// it need not): only a sandbox of an image pool, booted on the task's own
// image (rootfs, the task's root filesystem mounts), whose root container
// looks like the task's own would, can run it as a process.
func ProcessBlocker(spec *specs.Spec, rootfs []mount.Mount, sb *sandbox.Sandbox, volumes, docker bool) string {
	if sb.Pool == nil || len(sb.Pool.Layers) == 0 {
		return "the pool has no image"
	}
	if !slices.Equal(Layers(rootfs), sb.Pool.Layers) {
		return fmt.Sprintf("its image is not the pool's %s", sb.Pool.Image)
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
	case spec.Linux != nil && spec.Linux.Seccomp != nil:
		// gVisor filters a process started in a container with that
		// container's profile, not the task's.
		return "it has a seccomp profile"
	case spec.Linux != nil && ownMasks(spec.Linux):
		return "it masks or makes read-only paths of its root filesystem"
	}
	standard := map[string]string{}
	for _, m := range bootspec.StandardMounts() {
		standard[m.Destination] = m.Type
	}
	for _, m := range spec.Mounts {
		if t, ok := standard[m.Destination]; !ok || t != m.Type {
			return fmt.Sprintf("it mounts %s (%s)", m.Destination, m.Type)
		}
	}
	return ""
}

// PauseBlocker says why a CRI pod's sandbox (pause) container that
// adopted sb must run as a container inside it ("" if it need not): in
// any pool's sandbox but a docker-mode one, it runs as a process started
// in the root container — the pool's own gvx-pause (PauseProcess), which
// pauses as well as the pod's image's — and saves the container the
// pause image's gofer and gVisor's create and start of a container. The
// pod's hostname, cgroup and network namespace come to the sandbox all
// the same (the shim's startUTS, sentry/exectask's joinPod).
func PauseBlocker(sb *sandbox.Sandbox, docker bool) string {
	switch {
	case docker:
		return "docker mode"
	case sb.Pool == nil || sb.Pool.Pause == "":
		return "the pool sandbox has no gvx-pause"
	}
	return ""
}

// PauseProcess makes spec, a pod's sandbox container's that adopted sb as
// a process (PauseBlocker), run the pool's gvx-pause: the pause image's
// own binary is not in the sandbox's root container.
func PauseProcess(spec *specs.Spec, sb *sandbox.Sandbox) {
	spec.Process.Args = []string{sb.Pool.Pause}
}

// Layers returns the read-only layer directories of a root filesystem given
// as containerd mounts, topmost first: an overlay's lowerdirs (its upper
// directory is the container's own) or a read-only bind mount's source (a
// view of a one-layer image). It returns nil for anything else. Two root
// filesystems with the same layers show the same image.
func Layers(mounts []mount.Mount) []string {
	if len(mounts) != 1 {
		return nil
	}
	m := mounts[0]
	var layers []string
	switch {
	case m.Type == "overlay":
		for _, o := range m.Options {
			switch {
			case strings.HasPrefix(o, "lowerdir="):
				layers = append(layers, strings.Split(strings.TrimPrefix(o, "lowerdir="), ":")...)
			case strings.HasPrefix(o, "lowerdir+="):
				layers = append(layers, strings.TrimPrefix(o, "lowerdir+="))
			}
		}
	case m.Type == "bind" && slices.Contains(m.Options, "ro"):
		layers = []string{m.Source}
	}
	return layers
}

// ownMasks says whether l masks or makes read-only a path outside /proc,
// /sys and /dev (gvx-sentry turns those into mounts of the task's own
// container: sentry/maskpaths); containerd's defaults all lie inside.
func ownMasks(l *specs.Linux) bool {
	for _, p := range append(slices.Clone(l.MaskedPaths), l.ReadonlyPaths...) {
		p = path.Clean(p)
		synthetic := false
		for _, d := range []string{"/proc", "/sys", "/dev"} {
			if p == d || strings.HasPrefix(p, d+"/") {
				synthetic = true
			}
		}
		if !synthetic {
			return true
		}
	}
	return false
}
