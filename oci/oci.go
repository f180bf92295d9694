// Package oci rewrites a task's OCI spec into the one its gvx sandbox runs.
//
// It validates what the sentry would otherwise reject obscurely, puts the
// sandbox in a user namespace that maps to unprivileged host ids, applies
// default resources, and turns on docker mode.
package oci

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
)

// ReadSpec reads the bundle's config.json.
func ReadSpec(bundle string) (*specs.Spec, error) {
	var s specs.Spec
	if err := api.ReadSpec(bundle, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// WriteSpec replaces the bundle's config.json atomically.
func WriteSpec(bundle string, s *specs.Spec) error {
	if err := api.WriteJSON(filepath.Join(bundle, api.SpecFile), s); err != nil {
		return fmt.Errorf("write OCI spec: %w", err)
	}
	return nil
}

// Validate rejects specs that cannot run in a gvx sandbox, with a message
// naming the field and the fix.
func Validate(s *specs.Spec) error {
	if s.Root == nil || s.Root.Path == "" {
		return errors.New("invalid OCI spec: root.path is empty; the bundle needs a root filesystem")
	}
	if s.Process == nil {
		return errors.New("invalid OCI spec: process is missing; give the task a command")
	}
	if len(s.Process.Args) == 0 {
		return errors.New("invalid OCI spec: process.args is empty; give the task a command")
	}
	if s.Process.Cwd == "" || !filepath.IsAbs(s.Process.Cwd) {
		return fmt.Errorf("invalid OCI spec: process.cwd %q must be an absolute path", s.Process.Cwd)
	}
	if s.Linux == nil {
		return errors.New("invalid OCI spec: linux section is missing")
	}
	for _, m := range s.Mounts {
		if !filepath.IsAbs(m.Destination) {
			return fmt.Errorf("invalid OCI spec: mount destination %q must be an absolute path", m.Destination)
		}
		if err := validateRRO(m); err != nil {
			return err
		}
	}
	if err := validateSysctls(s.Linux.Sysctl); err != nil {
		return err
	}
	return validatePropagation(s)
}

// IsBind reports whether m is a bind mount: of type bind, or any type with
// a bind or rbind option (as runc reads a spec).
func IsBind(m specs.Mount) bool {
	return m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
}

// validateRRO refuses a recursively read-only ("rro") mount gvx-sentry
// could not make so: one that is not a bind mount, or also says rw.
func validateRRO(m specs.Mount) error {
	if !slices.Contains(m.Options, "rro") {
		return nil
	}
	if !IsBind(m) {
		return fmt.Errorf("invalid OCI spec: mount %s (type %q) is recursively read-only (rro), which gvx supports for bind mounts only; use ro", m.Destination, m.Type)
	}
	if slices.Contains(m.Options, "rw") {
		return fmt.Errorf("invalid OCI spec: mount %s has both rro and rw; drop one", m.Destination)
	}
	return nil
}

// errShared explains why gvx refuses shared mount propagation.
const errShared = "mounts made inside a gVisor sandbox live in its own kernel and cannot propagate back to the host; " +
	"use HostToContainer (rslave) or None (rprivate) propagation instead of Bidirectional"

// validatePropagation refuses shared propagation — of the root filesystem
// (linux.rootfsPropagation: CRI sets rshared for a mount with
// Bidirectional propagation) or of a bind mount (a shared or rshared
// option) — before anything is mounted for the task.
func validatePropagation(s *specs.Spec) error {
	switch s.Linux.RootfsPropagation {
	case "shared", "rshared":
		return fmt.Errorf("invalid OCI spec: linux.rootfsPropagation %q is not supported: %s", s.Linux.RootfsPropagation, errShared)
	}
	for _, m := range s.Mounts {
		for _, o := range m.Options {
			if o == "shared" || o == "rshared" {
				return fmt.Errorf("invalid OCI spec: mount %s (source %s) has %q propagation, which is not supported: %s", m.Destination, m.Source, o, errShared)
			}
		}
	}
	return nil
}

// Pod roles of a container (PodRole): CRI's container-type annotation.
const (
	RoleNone      = ""                   // not part of a CRI pod
	RolePause     = api.CRIRoleSandbox   // the pod's pause container
	RoleContainer = api.CRIRoleContainer // an application container of the pod
)

// PodRole says what a container is in a Kubernetes pod, and which pod.
func PodRole(s *specs.Spec) (role, pod string) {
	return s.Annotations[api.CRIContainerType], s.Annotations[api.CRISandboxID]
}

// NetnsPath is the network namespace s joins ("" for a new one, or none).
func NetnsPath(s *specs.Spec) string {
	if s.Linux == nil {
		return ""
	}
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			return ns.Path
		}
	}
	return ""
}

// Mapping is the user namespace a sandbox gets: guest ids 0..Size-1 are host
// ids HostUID.. and HostGID...
type Mapping struct {
	HostUID, HostGID, Size uint32
}

// Prepare validates s and rewrites it in place for a gvx sandbox. It returns
// the user namespace mapping in force.
func Prepare(s *specs.Spec, c config.Config) (Mapping, error) {
	if err := Validate(s); err != nil {
		return Mapping{}, err
	}
	if err := refuseOwnAnnotations(s); err != nil {
		return Mapping{}, err
	}
	m, err := ensureUserNS(s, c.UserNS)
	if err != nil {
		return Mapping{}, err
	}
	applyResources(s, c.Resources)
	if err := applyQuotas(s, c.Resources); err != nil {
		return Mapping{}, err
	}
	return m, nil
}

// ensureUserNS gives the sandbox a user namespace unless the spec already
// has one; an existing one must not map guest root to host root.
func ensureUserNS(s *specs.Spec, u config.UserNS) (Mapping, error) {
	has := false
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.UserNamespace {
			if ns.Path != "" {
				return Mapping{}, fmt.Errorf("invalid OCI spec: joining user namespace %s is not supported; leave the user namespace to gvx", ns.Path)
			}
			has = true
		}
	}
	if has && len(s.Linux.UIDMappings) > 0 {
		m, err := single(s.Linux.UIDMappings, s.Linux.GIDMappings)
		if err != nil {
			return Mapping{}, err
		}
		return m, nil
	}
	if !has {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
	}
	s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: u.HostUID, Size: u.Size}}
	s.Linux.GIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: u.HostGID, Size: u.Size}}
	return Mapping{HostUID: u.HostUID, HostGID: u.HostGID, Size: u.Size}, nil
}

func single(uids, gids []specs.LinuxIDMapping) (Mapping, error) {
	if len(uids) != 1 || len(gids) != 1 || uids[0].ContainerID != 0 || gids[0].ContainerID != 0 || uids[0].Size != gids[0].Size {
		return Mapping{}, errors.New("invalid OCI spec: gvx supports one uid and one gid mapping starting at container id 0, of equal size")
	}
	if size := uint64(uids[0].Size); size == 0 || uint64(uids[0].HostID)+size > 1<<32 || uint64(gids[0].HostID)+size > 1<<32 {
		return Mapping{}, fmt.Errorf("invalid OCI spec: uid/gid mapping of %d ids from host ids %d/%d is empty or runs past the 32-bit id space; give a size of at least 1 that fits (e.g. 65536 from 100000)",
			uids[0].Size, uids[0].HostID, gids[0].HostID)
	}
	if uids[0].HostID == 0 || gids[0].HostID == 0 {
		return Mapping{}, errors.New("invalid OCI spec: uid/gid mapping puts the sandbox's root at host id 0; map it to an unprivileged range (e.g. 100000)")
	}
	return Mapping{HostUID: uids[0].HostID, HostGID: gids[0].HostID, Size: uids[0].Size}, nil
}

// ConfigResources are the sandbox-level resources the config's defaults
// give a spec that sets none (what Prepare applies; SandboxResources of
// such a spec).
func ConfigResources(r config.Resources) Resources {
	out := Resources{MemoryLimit: r.MemoryBytes}
	if r.CPUMillis > 0 {
		out.CPUPeriod = cpuPeriod
		out.CPUQuota = r.CPUMillis * int64(cpuPeriod) / 1000
	}
	return out
}

// cpuPeriod is the CFS period gvx's CPU defaults are expressed in.
const cpuPeriod = 100000

func applyResources(s *specs.Spec, r config.Resources) {
	if r.MemoryBytes == 0 && r.CPUMillis == 0 {
		return
	}
	def := ConfigResources(r)
	if s.Linux.Resources == nil {
		s.Linux.Resources = &specs.LinuxResources{}
	}
	res := s.Linux.Resources
	if r.MemoryBytes > 0 {
		if res.Memory == nil {
			res.Memory = &specs.LinuxMemory{}
		}
		if res.Memory.Limit == nil || *res.Memory.Limit <= 0 {
			v := def.MemoryLimit
			res.Memory.Limit = &v
		}
	}
	if r.CPUMillis > 0 {
		if res.CPU == nil {
			res.CPU = &specs.LinuxCPU{}
		}
		if res.CPU.Quota == nil || *res.CPU.Quota <= 0 {
			period, quota := def.CPUPeriod, def.CPUQuota
			res.CPU.Period = &period
			res.CPU.Quota = &quota
		}
	}
}

// AddCreateRuntimeHook makes `hook args...` the first createRuntime hook,
// so it runs on the host against the sandbox before anything else (such as
// nerdctl's CNI hook) and before gVisor copies the network namespace's
// interfaces.
func AddCreateRuntimeHook(s *specs.Spec, hook string, args ...string) {
	if s.Hooks == nil {
		s.Hooks = &specs.Hooks{}
	}
	h := specs.Hook{Path: hook, Args: append([]string{filepath.Base(hook)}, args...)}
	s.Hooks.CreateRuntime = append([]specs.Hook{h}, s.Hooks.CreateRuntime...)
}

// IDMapOptions returns the mount options that make containerd's mount
// package present a rootfs layer with host ids shifted into m, so the
// unprivileged sandbox sees host root's files as its own root's.
func (m Mapping) IDMapOptions() []string {
	return []string{
		fmt.Sprintf("uidmap=0:%d:%d", m.HostUID, m.Size),
		fmt.Sprintf("gidmap=0:%d:%d", m.HostGID, m.Size),
	}
}

// Resources is the part of a spec's resources that a sandbox gets at boot
// and keeps: a task can run in a sandbox booted for other resources only if
// these are equal.
type Resources struct {
	MemoryLimit int64  `json:"memory_limit,omitempty"`
	CPUQuota    int64  `json:"cpu_quota,omitempty"`
	CPUPeriod   uint64 `json:"cpu_period,omitempty"`
	CPUShares   uint64 `json:"cpu_shares,omitempty"`
	PidsLimit   int64  `json:"pids_limit,omitempty"`
}

// SandboxResources extracts the sandbox-level resources of r (nil: none).
func SandboxResources(r *specs.LinuxResources) Resources {
	var out Resources
	if r == nil {
		return out
	}
	if r.Memory != nil && r.Memory.Limit != nil && *r.Memory.Limit > 0 {
		out.MemoryLimit = *r.Memory.Limit
	}
	if r.CPU != nil {
		if r.CPU.Quota != nil && *r.CPU.Quota > 0 {
			out.CPUQuota = *r.CPU.Quota
			if r.CPU.Period != nil {
				out.CPUPeriod = *r.CPU.Period
			}
		}
		// 1024 is the kernel's default weight, which clients spell out.
		if r.CPU.Shares != nil && *r.CPU.Shares != 1024 {
			out.CPUShares = *r.CPU.Shares
		}
	}
	if r.Pids != nil && r.Pids.Limit != nil && *r.Pids.Limit > 0 {
		out.PidsLimit = *r.Pids.Limit
	}
	return out
}

// OwnAnnotations are the annotations only gvx sets on a task's spec, after
// Prepare: which running sandbox a task's process starts in, which
// warm-pool sandbox a container's delete destroys, which network
// namespace's interfaces gvx-sentry (as root) moves into an adopted pod
// sandbox, and which cgroup it moves that sandbox into. A spec that
// arrives with one would start its process in another episode's sandbox,
// destroy it, take the interfaces (and the addresses) of any network
// namespace — the host's included — or put a sandbox in any cgroup.
var OwnAnnotations = []string{api.AnnotationPoolExec, api.AnnotationPoolSandbox, api.AnnotationPodNetns, api.AnnotationPodCgroup}

// RestoreFrom is the checkpoint image directory s asks the shim to
// restore from (api.AnnotationRestoreFrom; "" for a fresh boot). A
// Kubernetes pod's containers may not ask: the annotation names a host
// directory whose state the Sentry would load, and pod authors reach
// containerd's pod_annotations.
func RestoreFrom(s *specs.Spec) (string, error) {
	dir, ok := s.Annotations[api.AnnotationRestoreFrom]
	if !ok {
		return "", nil
	}
	if role, _ := PodRole(s); role != "" {
		return "", fmt.Errorf("invalid OCI spec: annotation %s=%q on a Kubernetes pod's %s: pods may not restore from a host directory; remove %s from containerd's pod_annotations", api.AnnotationRestoreFrom, dir, role, api.AnnotationRestoreFrom)
	}
	return dir, nil
}

// RestoreTarget says whether spec s asks for a restore target
// (api.AnnotationRestoreTarget): a sandbox booted at create that its Start
// restores a checkpoint into. Not for Kubernetes pods, which may not
// restore from a host directory.
func RestoreTarget(s *specs.Spec) (bool, error) {
	v, ok := s.Annotations[api.AnnotationRestoreTarget]
	if !ok {
		return false, nil
	}
	if v != "true" && v != "false" {
		return false, fmt.Errorf("invalid OCI spec: annotation %s=%q: want true or false", api.AnnotationRestoreTarget, v)
	}
	if role, _ := PodRole(s); role != "" && v == "true" {
		return false, fmt.Errorf("invalid OCI spec: annotation %s on a Kubernetes pod's %s: pods may not restore from a host directory; remove %s from containerd's pod_annotations", api.AnnotationRestoreTarget, role, api.AnnotationRestoreTarget)
	}
	if _, from := s.Annotations[api.AnnotationRestoreFrom]; from && v == "true" {
		return false, fmt.Errorf("invalid OCI spec: annotations %s and %s together: a restore target is created empty and told its checkpoint later; drop one", api.AnnotationRestoreTarget, api.AnnotationRestoreFrom)
	}
	return v == "true", nil
}

func refuseOwnAnnotations(s *specs.Spec) error {
	for _, a := range OwnAnnotations {
		if v, ok := s.Annotations[a]; ok {
			return fmt.Errorf("invalid OCI spec: annotation %s=%q is set by gvx itself when a task adopts a pool sandbox; remove it (use [pool] in the config to run tasks in warm-pool sandboxes)", a, v)
		}
	}
	return nil
}
