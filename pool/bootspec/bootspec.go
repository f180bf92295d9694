// Package bootspec is how a warm pool boots its sandboxes under a gvx
// configuration.
//
// Everything the pool server decides at boot and a task must match to
// adopt one of its sandboxes is derived here, once, from the config: the
// gvx-sentry flags, the sandbox-level resources, the user namespace, the
// root container's spec. Class hashes them, so that a task's shim (which
// reads the same config) asks the pool for exactly the sandboxes its own
// boot would have made.
package bootspec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/oci"
)

// PauseInGuest is where gvx-pause is in a plain pool's root container
// (the pool's own root filesystem, api.PoolDir.Rootfs).
const PauseInGuest = "/pause"

// Hostname is a pool sandbox's hostname as booted: a task that asks for
// another gets it set before it starts (sandbox.SetUTS), and a reset puts
// this one back.
const Hostname = "gvx-pool"

// PausePath is gvx-pause as installed next to gvx-sentry at sentry.
func PausePath(sentry string) string { return filepath.Join(filepath.Dir(sentry), api.PauseBinary) }

// InstallPause copies gvx-pause (pause, on the host) to PauseInGuest in
// rootfs, a plain pool sandbox's root filesystem.
func InstallPause(pause, rootfs string) error {
	data, err := os.ReadFile(pause)
	if err != nil {
		return err
	}
	if err := api.WriteFile(filepath.Join(rootfs, strings.TrimPrefix(PauseInGuest, "/")), data, 0o755); err != nil {
		return fmt.Errorf("install %s in %s: %w", api.PauseBinary, rootfs, err)
	}
	return nil
}

// PauseInImage is where gvx-pause is in an image pool's root container
// (added to the image's mount in the pool's upper directory).
const PauseInImage = "/.gvx-pause"

// Class identifies how a sandbox is booted: two configurations with the
// same class boot interchangeable sandboxes.
func Class(cfg config.Config, sentry string) string {
	res, _ := json.Marshal(Resources(cfg))
	flags := Flags(cfg)
	sort.Strings(flags)
	h := sha256.New()
	fmt.Fprintf(h, "sentry=%s\nflags=%s\nuserns=%d:%d:%d\nresources=%s\n",
		sentry, strings.Join(flags, " "), cfg.UserNS.HostUID, cfg.UserNS.HostGID, cfg.UserNS.Size, res)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Flags are the gvx-sentry global flags pool sandboxes boot with under
// cfg: its flags, and docker mode's when [docker] enabled (a docker pool
// serves docker-mode tasks only, a plain pool plain ones).
func Flags(cfg config.Config) []string {
	flags := append([]string(nil), cfg.SentryFlagList()...)
	if cfg.Docker.Enabled {
		flags = append(flags, oci.DockerSentryFlags...)
	}
	return flags
}

// Resources are the sandbox-level resources pool sandboxes get under cfg
// (its [resources] defaults); only tasks asking for the same can adopt
// one.
func Resources(cfg config.Config) oci.Resources { return oci.ConfigResources(cfg.Resources) }

// RootSpec is the spec of a plain pool sandbox's root container: gvx-pause
// on the pool's read-only root filesystem, its own (empty) network
// namespace. It still needs oci.Prepare.
func RootSpec(rootfs, cgroup string) *specs.Spec {
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Args:            []string{PauseInGuest},
			Cwd:             "/",
			Env:             []string{"PATH=/"},
			NoNewPrivileges: true,
		},
		Root:     &specs.Root{Path: rootfs, Readonly: true},
		Hostname: Hostname,
		Linux: &specs.Linux{
			// Never nil: runsc's update of the root container (on behalf
			// of a task started in it) dereferences the spec's resources.
			Resources:   &specs.LinuxResources{},
			CgroupsPath: cgroup,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
			},
		},
	}
}

// ImageRootSpec is the spec of an image pool sandbox's root container:
// gvx-pause on the image (mounted at image), with the mounts of
// containerd's default spec, so that a task of the image that asks for
// nothing else can start as a process in it.
func ImageRootSpec(image, cgroup string) *specs.Spec {
	s := RootSpec(image, cgroup)
	s.Root.Readonly = false // writes go to the sandbox's memory
	s.Process.Args = []string{PauseInImage}
	s.Mounts = StandardMounts()
	return s
}

// StandardMounts are the mounts of containerd's default spec (ctr and the
// containerd client give every container these).
func StandardMounts() []specs.Mount {
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
	}
}
