package api

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DefaultStateDir is gvx's state directory unless the config's state_dir
// says otherwise.
const DefaultStateDir = "/run/gvx"

// SDKStateDir is the Go SDK's state directory unless its client is told
// another; SDKFIFODir holds its processes' stdio FIFOs.
const (
	SDKStateDir = DefaultStateDir + "/sdk"
	SDKFIFODir  = SDKStateDir + "/fifo"
)

// Layout is what lives where in a gvx state directory. Every directory
// below it must be traversable by the sandboxes' unprivileged host uid.
type Layout struct {
	// Dir is the state directory (the config's state_dir).
	Dir string
}

// SentryRoots holds the sentry roots of all tasks.
func (l Layout) SentryRoots() string { return filepath.Join(l.Dir, "sentry") }

// SentryRoot is the sentry root directory of the sandbox task id boots (or
// adopts, or, for a pod, its pod's); containerd's runc shim adds the
// namespace below it.
func (l Layout) SentryRoot(id string) string { return filepath.Join(l.SentryRoots(), id) }

// TaskDir is the directory of task ns/id's link to gvx-sentry, its flags
// (FlagsFile) and what gvx-sentry makes for it there (MaskedFile,
// SysClassDir, HostBindDir): in SentryRoot(id), one per namespace — the
// same id may run in several — named "@" and the namespace, which no
// namespace's sentry root can be (containerd's namespace names have no
// "@").
func (l Layout) TaskDir(ns, id string) string { return filepath.Join(l.SentryRoot(id), "@"+ns) }

// SharedSentryRoot is gVisor's --shared-root of every sandbox: state
// gVisor shares across sandboxes, the empty network namespace its gofers
// join, pinned at SentryRoot(SharedSentryRoot()).NullNetNS() by the first
// gofer; `gvx gc` unpins it when no sandbox is left.
func (l Layout) SharedSentryRoot() string { return filepath.Join(l.Dir, "sentry-shared") }

// RootfsDir holds the tasks' root filesystem mounts.
func (l Layout) RootfsDir() string { return filepath.Join(l.Dir, "rootfs") }

// Rootfs is where task id of namespace ns gets its root filesystem.
func (l Layout) Rootfs(ns, id string) string { return filepath.Join(l.RootfsDir(), ns, id) }

// VolumesDir holds the tasks' volume staging directories.
func (l Layout) VolumesDir() string { return filepath.Join(l.Dir, "volumes") }

// Volumes is the staging directory of task id's ext4lite volumes (one
// numbered directory each; empty on the host).
func (l Layout) Volumes(ns, id string) string { return filepath.Join(l.VolumesDir(), ns, id) }

// DockerDir holds the host-side directories of docker-mode tasks.
func (l Layout) DockerDir() string { return filepath.Join(l.Dir, "docker") }

// Docker is the directory where docker-mode task id's sandbox creates the
// socket of its dockerd (DockerSocket).
func (l Layout) Docker(ns, id string) string { return filepath.Join(l.DockerDir(), ns, id) }

// DockerSocket is where the host reaches docker-mode task id's dockerd.
func (l Layout) DockerSocket(ns, id string) string {
	return filepath.Join(l.Docker(ns, id), DockerSocketName)
}

// DockerSocketName is the inner dockerd's socket's file name, on the host
// and in the guest.
const DockerSocketName = "docker.sock"

// DockerRelaySocket is where, for a docker-mode task id on gvx's NAT, the
// NAT publishes gvx-relay's guest port: the shim's docker socket
// connects each of its connections there (docs/checkpoint.md).
func (l Layout) DockerRelaySocket(ns, id string) string {
	return filepath.Join(l.Docker(ns, id), "relay.sock")
}

// RelaysDir holds the copies of gvx-relay that proxied docker-mode
// sandboxes run, one per build, named by the sha256 of its bytes (Relay).
func (l Layout) RelaysDir() string { return filepath.Join(l.Dir, "relay") }

// Relay is the copy of the gvx-relay build whose sha256 is digest (hex).
// A copy is never changed once made: a sandbox checkpointed while it ran
// one is restored onto the same bytes, whatever the host's gvx-relay is
// by then.
func (l Layout) Relay(digest string) string { return filepath.Join(l.RelaysDir(), digest) }

// DefaultPoolSocket is where `gvx pool serve` listens unless the config's
// pool.socket says otherwise.
func (l Layout) DefaultPoolSocket() string { return filepath.Join(l.Dir, "pool.sock") }

// ExecSlots holds the node's exec slots: one file per exec that may be
// alive at once on the node, locked by the shim of a live exec
// (resources.node_max_execs).
func (l Layout) ExecSlots() string { return filepath.Join(l.Dir, "execs") }

// Pools holds the directories of all pools of this state directory.
func (l Layout) Pools() string { return filepath.Join(l.Dir, "pool") }

// Pool is the directory of the pool serving on socket. Every pool socket
// has its own, so that pool servers of different configurations never take
// each other's sandboxes for their own.
func (l Layout) Pool(socket string) PoolDir {
	sum := sha256.Sum256([]byte(socket))
	return PoolDir(filepath.Join(l.Pools(), hex.EncodeToString(sum[:6])))
}

// PoolDir is one pool's directory: its sandboxes (a directory each, named
// by id), the root filesystem of their root containers, an image pool's
// image mount.
type PoolDir string

// PoolSandboxPrefix starts the id of every pool sandbox.
const PoolSandboxPrefix = "gvxpool-"

// PoolCgroupParent is the cgroup every pool sandbox boots in, each in
// /PoolCgroupParent/<its id>.
const PoolCgroupParent = "gvx-pool"

// Rootfs is the pool's root filesystem for its sandboxes' root containers.
func (p PoolDir) Rootfs() string { return filepath.Join(string(p), "rootfs") }

// Lock is the pool server's lock file: flock'd by the server working on
// the directory, removed with it.
func (p PoolDir) Lock() string { return filepath.Join(string(p), "server.lock") }

// Image is where an image pool mounts its image.
func (p PoolDir) Image() string { return filepath.Join(string(p), "image") }

// ImageUpper, beside Image, holds the image mount's overlay upper and
// work directories.
func (p PoolDir) ImageUpper() string { return p.Image() + "-rw" }

// Sandbox is the directory of pool sandbox id.
func (p PoolDir) Sandbox(id string) SandboxDir { return SandboxDir(filepath.Join(string(p), id)) }

// Sandboxes lists the directories of the pool's sandboxes (those named
// with PoolSandboxPrefix).
func (p PoolDir) Sandboxes() []SandboxDir {
	entries, _ := os.ReadDir(string(p))
	var out []SandboxDir
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), PoolSandboxPrefix) {
			out = append(out, p.Sandbox(e.Name()))
		}
	}
	return out
}

// SandboxDir is the directory of one sandbox a pool booted: everything it
// has on the host.
type SandboxDir string

// Root is the sandbox's sentry root.
func (d SandboxDir) Root() SentryRoot { return SentryRoot(filepath.Join(string(d), "root")) }

// Bundle is its root container's bundle.
func (d SandboxDir) Bundle() string { return filepath.Join(string(d), "bundle") }

// Record describes the sandbox (JSON), once booted.
func (d SandboxDir) Record() string { return filepath.Join(string(d), "sandbox.json") }

// Claimed marks the sandbox as a task's: the pool server no longer owns it.
func (d SandboxDir) Claimed() string { return filepath.Join(string(d), "claimed") }

// PidFile is where its create writes the sandbox's pid.
func (d SandboxDir) PidFile() string { return filepath.Join(string(d), "pid") }

// SentryRoot is a gvx-sentry state root (its --root): gVisor's state
// files of the sandboxes and containers in it, and gvx-sentry's own.
type SentryRoot string

// NullNetNS is where gVisor pins an empty network namespace for its gofers
// (a bind mount to undo at teardown).
func (r SentryRoot) NullNetNS() string { return filepath.Join(string(r), "null-netns") }

// MonitorSocket is where the monitor of container or task id listens.
func (r SentryRoot) MonitorSocket(id string) string {
	return filepath.Join(string(r), "gvx-monitor-"+id+".sock")
}

// OOMMarker is where the monitor of container id, inside a running
// sandbox, records that it killed the container for exceeding its memory
// limit (gVisor accounts a container's memory but does not enforce its
// limit); the shim reports the exit as an OOM kill.
func (r SentryRoot) OOMMarker(id string) string {
	return filepath.Join(string(r), "gvx-oom-"+id)
}

// MonitorEnded is where the monitor of container id, inside a running
// sandbox, records (MonitorEndedMark, in a file it created empty) that the
// container's init exited and that it killed what was left of the
// container's processes: a `kill --all` after that has nothing to do
// (gvx-runtime answers it without gvx-sentry).
func (r SentryRoot) MonitorEnded(id string) string {
	return filepath.Join(string(r), "gvx-ended-"+id)
}

// EnginePaused is where the rollout engine marks that it paused sandbox
// (or container) id's kernel through its control socket: the file, made
// right after the pause and removed right before the resume, holds the
// pausing process's procfs.Identity. gVisor answers no question about a
// pause, and a resume of a kernel that is not paused ends its Sentry, so a
// later process (the one that paused it crashed) resumes it only when the
// mark is there and its process is gone.
func (r SentryRoot) EnginePaused(id string) string {
	return filepath.Join(string(r), "gvx-paused-"+id)
}

// MonitorEndedMark is what a MonitorEnded file holds once its container
// ended.
const MonitorEndedMark = "ended\n"

// TaskRecord is gvx-sentry's record of task id, started as a process in a
// running sandbox's root container.
func (r SentryRoot) TaskRecord(id string) string {
	return filepath.Join(string(r), "gvx-exectask-"+id+".json")
}

// SandboxState is gVisor's state file of sandbox id's root container.
func (r SentryRoot) SandboxState(id string) string {
	return filepath.Join(string(r), id+"_sandbox:"+id+".state")
}

// ContainerStates matches gVisor's state file of container id, whichever
// sandbox it runs in.
func (r SentryRoot) ContainerStates(id string) string {
	return filepath.Join(string(r), id+"_sandbox:*.state")
}

// StateSuffix ends the name of every gVisor state file in a sentry root.
const StateSuffix = ".state"

// RestoreTarget is where the shim names (one line) the checkpoint image
// directory restore target id restores at its start: gvx-sentry's start
// of it is then gVisor's restore into the created container.
func (r SentryRoot) RestoreTarget(id string) string {
	return filepath.Join(string(r), "gvx-restore-"+id)
}

// RestoreTargetVolumes is where the shim lists (the JSON of a []Volume,
// each with its Destination) the ext4lite volumes restore target id
// mounts at its start: the checkpoint's copies, put in place and checked
// once the checkpoint was named. gvx-sentry mounts them inside the
// target's gofer before gVisor's restore (whose gofer, booted before the
// checkpoint was known, bind-mounted empty staging directories there).
func (r SentryRoot) RestoreTargetVolumes(id string) string {
	return filepath.Join(string(r), "gvx-volumes-"+id+".json")
}

// NATStats is where the NAT of sandbox id keeps its counters (NATStats,
// JSON), rewritten as they change.
func (r SentryRoot) NATStats(id string) string {
	return filepath.Join(string(r), "gvx-nat-"+id+".json")
}

// NATControl is the NAT of sandbox id's control socket (NATControl
// requests), root's alone.
func (r SentryRoot) NATControl(id string) string {
	return filepath.Join(string(r), "gvx-nat-"+id+".sock")
}

// NATControlGlob matches the control socket of the NAT in a sentry root
// (one per sandbox).
const NATControlGlob = "gvx-nat-*.sock"

// FindNATControl is the control socket of the NAT in r, whatever its
// sandbox's id (an adopted pool sandbox's, behind a link): an error when
// r holds none (a sandbox without a NAT, or not started yet).
func (r SentryRoot) FindNATControl() (string, error) {
	socks, _ := filepath.Glob(filepath.Join(string(r), NATControlGlob))
	if len(socks) != 1 {
		return "", fmt.Errorf("%d NAT control sockets in %s", len(socks), r)
	}
	return socks[0], nil
}

// NATLog is the log of the NAT of sandbox id (its refusals).
func (r SentryRoot) NATLog(id string) string {
	return filepath.Join(string(r), "gvx-nat-"+id+".log")
}
