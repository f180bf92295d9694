package api

// RuntimeType is the runtime type containerd knows gvx by (containerd
// resolves it to the shim binary ShimBinary, which starts ShimServerBinary
// beside it).
const RuntimeType = "io.containerd.gvx.v2"

// Binary names. The shim finds gvx-sentry next to itself (or by config);
// the others are installed next to gvx-sentry.
const (
	ShimBinary       = "containerd-shim-gvx-v2"
	ShimServerBinary = "gvx-shim" // the shim server ShimBinary starts (containerd's libraries)
	CLIBinary        = "gvx"
	SentryBinary     = "gvx-sentry"
	RuntimeBinary    = "gvx-runtime" // gvx-sentry's runc-compatible front
	HookBinary       = "gvx-hook"    // the createRuntime hook
	PauseBinary      = "gvx-pause"   // a pool sandbox's init
	RelayBinary      = "gvx-relay"   // proxied docker mode's guest relay
	NATBinary        = "gvx-nat"     // a sandbox's userspace NAT process (network = "nat")
)

// ShimRecordFile, in a task's bundle, is the shim's record of what it set
// up for the task on the host; the shim removes it once all of that is
// released (containerd-shim-gvx-v2's delete leaves the clean-up to the
// shim server while it is there).
const ShimRecordFile = "gvx-task.json"

// RuntimeWaitCommand is gvx-runtime's own subcommand (argv[1]) for the
// host process that stands for a task's exec in an image pool's sandbox.
const RuntimeWaitCommand = "gvx-runtime-wait"

// SentryWaitCommand is gvx-sentry's own subcommand (argv[1]) for the host
// process that stands for an exec gvx-sentry ran (a pod's container).
const SentryWaitCommand = "gvx-exec-wait"

// FlagsEnv carries the global gvx-sentry flags (space separated, each
// --name or --name=value) that a caller wants on every call of a sandbox.
const FlagsEnv = "GVX_SENTRY_FLAGS"

// FlagsFile, next to the path gvx-sentry is invoked by (argv[0]), holds
// one task's global flags: the shim runs each task's calls through the
// task's own link to gvx-sentry with its flags beside it.
const FlagsFile = "gvx-sentry-flags"

// RelayDigestFile, next to FlagsFile, holds the sha256 of the gvx-relay
// copy a proxied docker-mode task's guest runs (Layout.Relay): the shim
// writes it at create, and the rollout engine's checkpoints of the task
// keep that copy, as the shim's do.
const RelayDigestFile = "gvx-relay.sha256"

// MaskedFile, next to FlagsFile, is the empty read-only file gvx-sentry
// bind-mounts over each masked file of a task's spec (linux.maskedPaths),
// which gVisor does not apply itself.
const MaskedFile = "gvx-masked"

// HostBindDir, next to FlagsFile, holds the staging points of a task's
// idmapped (or recursively read-only) host bind mounts: gvx-sentry
// attaches each clone there in its private mount namespace, so on the
// host they are empty directories and files.
const HostBindDir = "gvx-binds"

// SysClassDir, next to FlagsFile, is the read-only directory gvx-sentry
// mounts at a container's /sys/class, holding an empty net/ (gVisor's
// sysfs has none, and brctl needs it).
const SysClassDir = "gvx-sysclass"

// ExecGuestPidSuffix, appended to the pid file of a detached exec
// (`exec --pid-file P`, which names the host process standing for the
// exec), names the file where gvx-sentry and gvx-runtime write the exec'd
// process's pid inside the sandbox. The shim delivers SIGKILL and SIGSTOP
// there itself: the host process cannot forward a signal it cannot catch.
const ExecGuestPidSuffix = ".guest"

// HookLoopback is gvx-hook's argument that brings up the loopback
// interface of the sandbox's network namespace.
const HookLoopback = "--loopback"

// Annotations gvx reads from or writes to a task's OCI spec.
const (
	// AnnotationVolumes lists the ext4lite volumes gvx-sentry mounts in
	// the sandbox's private mount namespace (JSON, see Volume).
	AnnotationVolumes = "dev.gvx.volumes"
	// AnnotationPoolExec names the running sandbox whose root container
	// the task's process starts in (a task adopting an image pool's
	// sandbox).
	AnnotationPoolExec = "dev.gvx.pool-exec"
	// AnnotationPoolSandbox names the warm-pool sandbox a container
	// adopted: the sandbox is the container's alone, and gvx-sentry's
	// delete of the container destroys it.
	AnnotationPoolSandbox = "dev.gvx.pool-sandbox"
	// AnnotationPodNetns is the network namespace of a CRI pod whose
	// sandbox container adopted a warm-pool sandbox: gvx-sentry's create
	// of that container gives the running sandbox the interfaces of this
	// namespace (the pod's CNI network), as a sandbox booted in it would
	// have had them.
	AnnotationPodNetns = "dev.gvx.pod-netns"
	// AnnotationPodCgroup is the cgroup (a cgroupfs path, below the
	// kubelet's pod cgroup) of a CRI pod whose sandbox container adopted
	// a warm-pool sandbox: gvx-sentry's create of that container moves
	// the running sandbox's host processes there from the pool's cgroup,
	// with the limits it booted with, and records it as the sandbox's
	// cgroup in gVisor's state, as a sandbox booted there would have it.
	AnnotationPodCgroup = "dev.gvx.pod-cgroup"
	// AnnotationDocker asks for docker mode ("true"/"false").
	AnnotationDocker = "dev.gvx.docker"
	// GroupLabel puts several containers in one shim (one sandbox).
	GroupLabel = RuntimeType + ".group"
	// AnnotationMaxLifetime (a container label or spec annotation, a Go
	// duration such as "2h") is how long the janitor lets the sandbox run
	// before it stops it, over the config's janitor.max_lifetime.
	AnnotationMaxLifetime = "dev.gvx.max-lifetime"
	// AnnotationMemoryHigh sets the sandbox's reclaim threshold below its
	// memory limit (cgroup v2 memory.high, v1 memory.soft_limit_in_bytes):
	// bytes ("805306368", "768Mi"), a share of the limit ("90%"), or "0"
	// for none; over the config's resources.memory_high_percent.
	AnnotationMemoryHigh = "dev.gvx.memory-high"
	// AnnotationRootfsSize caps what the guest may write to its root
	// filesystem (bytes, or with a K/M/G/Ki/Mi/Gi suffix); over the
	// config's resources.rootfs_bytes. Writes past it fail with ENOSPC.
	AnnotationRootfsSize = "dev.gvx.rootfs-size"
	// AnnotationPidsLimit is the number of tasks (threads) gvx-sentry lets
	// the guest have: a clone past it fails with EAGAIN inside. The shim
	// sets it from the spec's linux.resources.pids.limit (and keeps a
	// larger host pids limit as a backstop, HostPidsLimit).
	AnnotationPidsLimit = "dev.gvx.pids-limit"
	// LeaseLabel marks the containerd leases an image pool holds.
	LeaseLabel = "dev.gvx.pool"
)

// CRI annotations (set by containerd's CRI plugin; gvx-sentry's gVisor
// reads them to put a container in an existing sandbox).
const (
	CRIContainerType = "io.kubernetes.cri.container-type"
	CRISandboxID     = "io.kubernetes.cri.sandbox-id"
	// CRIContainerName names a container within its sandbox; gVisor's
	// restore matches a sandbox's containers to the saved ones by it.
	CRIContainerName = "io.kubernetes.cri.container-name"
	// Values of CRIContainerType.
	CRIRoleSandbox   = "sandbox"   // a pod's pause container
	CRIRoleContainer = "container" // an application container
)

// NotRunning is the phrase a runc-compatible runtime prints when told to
// signal a container that is no longer running; containerd's runc shim
// (whose task service the gvx shim uses) reports NotFound for it, as
// containerd's clients expect after an exit. gvx-sentry and gvx-runtime
// say it whenever the sandbox or the task's process is gone.
const NotRunning = "container not running"

// The files of a gVisor checkpoint image directory (gVisor's names: runsc
// restore, which gvx-sentry runs, opens them by name; gvx writes them when
// it drives the sandbox's save itself).
const (
	CheckpointStateFile     = "checkpoint.img"
	CheckpointPagesMetaFile = "pages_meta.img"
	CheckpointPagesFile     = "pages.img"
)

// AnnotationRestoreFrom, on a task's spec, makes the shim restore the task
// from the gvx checkpoint image directory it names instead of booting it
// afresh (what containerd's WithRestoreImagePath does, for tasks whose
// runtime options are gvx's rather than runc's).
const AnnotationRestoreFrom = "dev.gvx.restore-from"

// AnnotationRestoreTarget ("true"), on a task's spec, creates the task as
// a restore target: its sandbox boots at create, and its Start restores
// into it the checkpoint an Update named (AnnotationRestoreImage) instead
// of starting the container afresh — a restore without a sandbox's boot.
const AnnotationRestoreTarget = "dev.gvx.restore-target"

// AnnotationRestoreImage, on a task Update's annotations, names the gvx
// checkpoint image directory a restore target (AnnotationRestoreTarget)
// restores at its Start.
const AnnotationRestoreImage = "dev.gvx.restore-image"
