package shim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/process"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/gvxrun/gvx/admission"
	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/checkpoint"
	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/internal/crifwd"
	"github.com/gvxrun/gvx/oci"
	"github.com/gvxrun/gvx/pool/adopt"
	"github.com/gvxrun/gvx/sandbox"
)

// gvxTask is one task's preparation and what it set up: containerd's
// create request, gvx's config, the spec as gvx rewrites it, and the
// record of everything on the host (record), saved before each step that
// leaves something behind.
type gvxTask struct {
	req    *task.CreateTaskRequest
	cfg    config.Config
	layout api.Layout
	spec   *specs.Spec
	rootfs []mount.Mount // containerd's root filesystem mounts
	rec    *record
	// role and pod: the task's place in a CRI pod; pause is the pod's
	// sandbox task when this is an application container of it.
	role, pod  string
	pause      *gvxTask
	mapping    oci.Mapping
	hook       string               // gvx-hook, when the sandbox's network needs it
	network    string               // the task's network mode (api.Network*)
	flags      []string             // gvx-sentry global flags of the task
	rootVol    *api.Volume          // an ext4 root filesystem, mounted like a volume
	rootfsSize int64                // the cap on root filesystem writes (0: none)
	vols       *taskVolumes         // leased ext4lite volumes (held in memory)
	docker     *dockerProxy         // proxied docker mode's host socket
	relay      string               // its guest's gvx-relay's digest (relaybin.go)
	fwd        *crifwd.Forwarder    // a pod's CRI port forwarding
	mounted    []checkpoint.Mounted // every volume, for checkpoints
	// restoring is the manifest of the checkpoint in checkpointDir the
	// task is restored from (nil: a task created afresh).
	restoring     *checkpoint.Manifest
	checkpointDir string
	// target: the task is a restore target (target.go); nil otherwise.
	target *target
	binary string // the task's gvx-sentry link
	front  bool   // the link is to gvx-runtime (frontLink)
	// uts: the adopted pool sandbox's hostname being set (startUTS);
	// set during the create, read after it.
	uts *utsSet
	// createFront: the link is to gvx-runtime for the create (and a
	// restore's start) alone, which mounts in a private mount namespace
	// (mountsPrivately).
	createFront bool
	// initPid is the host pid of the task's init (for a task in a running
	// sandbox, its monitor); endAll: the kill of its container's
	// processes after the monitor's death (monitorexit.go).
	initPid atomic.Int64
	endAll  endAll
	// checkpointing is held by a checkpoint of the task, which a kill
	// waits for; pending holds the signals other than SIGKILL sent while
	// the task was paused, delivered at its resume (pausedkill.go).
	checkpointing sync.Mutex
	pendingMu     sync.Mutex
	pending       []*task.KillRequest
	// paused: containerd paused the task (the shim's Pause) and has not
	// resumed it.
	paused atomic.Bool
	// oomPublished: its TaskOOM event is out (oomevent.go).
	oomPublished atomic.Bool
	fault        string        // the step after which to crash (tests)
	tRootfs      time.Duration // how long the rootfs mount took
}

// newTask reads what a create needs before gvx touches anything: the
// config the runtime options name, gvx-sentry, the bundle's spec and the
// task's place in a pod (pod finds a pod's sandbox task by id).
func newTask(ctx context.Context, r *task.CreateTaskRequest, pod func(id string) *gvxTask) (*gvxTask, error) {
	cfg, err := configFromOptions(r.Options)
	if err != nil {
		return nil, grpcError(errdefs.ErrInvalidArgument, err)
	}
	if lvl, err := logrus.ParseLevel(cfg.LogLevel); err == nil && !log.GetLogger(ctx).Logger.IsLevelEnabled(logrus.DebugLevel) {
		log.GetLogger(ctx).Logger.SetLevel(lvl)
	}
	self, _ := os.Executable()
	sentry, err := cfg.SentryPath(self)
	if err != nil {
		return nil, grpcError(errdefs.ErrFailedPrecondition, err)
	}
	spec, err := oci.ReadSpec(r.Bundle)
	if err != nil {
		return nil, grpcError(errdefs.ErrInvalidArgument, err)
	}
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, err
	}
	t := &gvxTask{req: r, cfg: cfg, layout: cfg.Layout(), spec: spec, fault: faultStep(spec),
		rec: &record{ID: r.ID, Namespace: ns, Bundle: r.Bundle, Sentry: sentry}}
	for _, m := range r.Rootfs {
		t.rootfs = append(t.rootfs, mount.Mount{Type: m.Type, Source: m.Source, Target: m.Target, Options: m.Options})
	}
	// A CRI pod is one sandbox: the pause container is its root container
	// (on the pod's network namespace) and each application container is
	// a container inside it, which gvx-sentry runs with a monitor process
	// standing for its init (see sentry/subcontainer).
	from, err := oci.RestoreFrom(spec)
	if err != nil {
		return nil, grpcError(errdefs.ErrInvalidArgument, err)
	}
	if from == "" && r.Checkpoint != "" && spec.Annotations[api.AnnotationRestoreTarget] != "" {
		// containerd's restore of a checkpoint of a backing the rollout
		// engine restored into a restore target: the container's spec
		// carries the annotation from the target's create; the request
		// restores.
		delete(spec.Annotations, api.AnnotationRestoreTarget)
	}
	if from != "" && r.Checkpoint == "" {
		// The runc task service restores a task whose request names a
		// checkpoint instead of booting it.
		r.Checkpoint = from
	}
	isTarget, err := oci.RestoreTarget(spec)
	if err != nil {
		return nil, grpcError(errdefs.ErrInvalidArgument, err)
	}
	if isTarget {
		if r.Checkpoint != "" {
			return nil, grpcError(errdefs.ErrInvalidArgument, fmt.Errorf("task %s: a restore target (%s=true) is created empty and told its checkpoint by a task Update (%s); create it without the checkpoint %s", r.ID, api.AnnotationRestoreTarget, api.AnnotationRestoreImage, r.Checkpoint))
		}
		t.target = &target{}
	}
	if r.Checkpoint != "" {
		if t.restoring, err = checkpoint.ReadManifest(r.Checkpoint); err != nil {
			return nil, grpcError(errdefs.ErrInvalidArgument, fmt.Errorf("restore %s: %w", r.ID, err))
		}
		t.checkpointDir = r.Checkpoint
		if from == "" && restoreCopy(r.Checkpoint) {
			t.rec.RestoreCopy = r.Checkpoint
		}
	}
	t.role, t.pod = oci.PodRole(spec)
	if t.role == oci.RoleContainer {
		t.pause = pod(t.pod)
	} else if err := admission.Check(cfg.Admission, cfg.StateDir); err != nil {
		// A new sandbox: refused before anything is set up.
		return nil, grpcError(errdefs.ErrResourceExhausted, fmt.Errorf("sandbox %s: %w", r.ID, err))
	}
	return t, nil
}

// prepare rewrites the spec and sets the host up for the sandbox, step by
// step, in this order; each step may rely on those before it.
func (t *gvxTask) prepare(ctx context.Context) error {
	for _, step := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"spec", t.prepareSpec},               // OOM score, user namespace, default resources
		{"volumes", t.prepareVolumes},         // ext4lite volumes and an ext4 root filesystem
		{"docker", t.prepareDocker},           // docker mode
		{"target", t.checkTarget},             // a restore target's shape
		{"pool", t.adoptPool},                 // a warm pool's sandbox, if one fits
		{"portforward", t.preparePortForward}, // CRI port forwarding into a pod
		{"hook", t.addHook},                   // gvx-hook for the sandbox's loopback
		{"sentry", t.linkSentry},              // the task's gvx-sentry link and flags
		{"rootfs", t.prepareRootfs},           // the root filesystem
		{"write", t.writeSpec},                // the rewritten spec into the bundle
		{"root", t.prepareSentryRoot},         // the sentry root and containerd's runc options
	} {
		if err := step.do(ctx); err != nil {
			return err
		}
		t.crashAfter(ctx, step.name)
	}
	return nil
}

// prepareSpec validates the spec and puts the sandbox in its unprivileged
// user namespace with the config's default resources.
func (t *gvxTask) prepareSpec(ctx context.Context) error {
	clampOOMScore(ctx, t.spec)
	t.restoreCgroup()
	m, err := oci.Prepare(t.spec, t.cfg)
	if err != nil {
		return grpcError(errdefs.ErrInvalidArgument, err)
	}
	t.mapping = m
	t.flags = t.cfg.SentryFlagList()
	if t.rootfsSize, err = oci.RootfsSize(t.spec, t.cfg.Resources.RootfsBytes); err != nil {
		return grpcError(errdefs.ErrInvalidArgument, err)
	}
	if t.rootfsSize > 0 {
		// The guest's root filesystem writes go to a file beside the
		// rootfs on the host's disk (not memory), at most that large: a
		// write past it fails with ENOSPC inside. An ext4 root filesystem
		// (prepareVolumes) is instead as large as its image.
		t.flags = append(t.flags, api.RootfsSizeFlag(t.rootfsSize))
	}
	if err := t.prepareNetwork(); err != nil {
		return grpcError(errdefs.ErrInvalidArgument, err)
	}
	if t.network == api.NetworkSandbox {
		if t.hook, err = config.HookPath(t.rec.Sentry); err != nil {
			return grpcError(errdefs.ErrFailedPrecondition, err)
		}
	}
	return nil
}

// prepareVolumes leases the task's ext4lite volumes and stages them (and
// an ext4 root filesystem) for gvx-sentry to mount.
func (t *gvxTask) prepareVolumes(ctx context.Context) error {
	r := t.rec
	t.rootVol = ext4Rootfs(t.rootfs, t.layout.Rootfs(r.Namespace, r.ID))
	mkdir := func(dir string) error { return r.makeDir(dir, 0o711, -1, -1) }
	var restore func(destination, image string) error
	if t.restoring != nil {
		restore = func(destination, image string) error { return t.restoreVolume(ctx, destination, image) }
	}
	var later *[]api.Volume
	if t.target != nil && t.restoring == nil {
		// A restore target's volumes come from the checkpoint it will be
		// named (aimVolumes).
		later = &t.target.vols
	}
	vols, mounted, err := prepareVolumes(ctx, t.spec, t.layout.Volumes(r.Namespace, r.ID), mkdir, t.rootVol, restore, later)
	if errors.Is(err, errTargetReadOnly) {
		return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("task %s cannot be a restore target (%s=true): %w", r.ID, api.AnnotationRestoreTarget, err))
	}
	if err != nil {
		return grpcError(errdefs.ErrInvalidArgument, err)
	}
	t.vols, t.mounted = vols, mounted
	if vols != nil || t.rootVol != nil || later != nil && len(*later) > 0 {
		// The sandbox leases its volumes exclusively (containerd its
		// snapshots), so gVisor may cache their contents without
		// revalidating against the host.
		t.flags = append(t.flags, "--file-access-mounts=exclusive")
	}
	if t.rootVol != nil {
		// Writes go to the container's own ext4 clone, not to memory.
		t.flags = append(t.flags, "--overlay2=none")
	}
	return nil
}

// prepareDocker turns on docker mode when the task or its config asks.
func (t *gvxTask) prepareDocker(context.Context) error {
	docker, err := dockerMode(t.cfg, t.spec)
	if err != nil {
		return grpcError(errdefs.ErrInvalidArgument, err)
	}
	r := t.rec
	r.Docker = docker
	if !docker {
		return nil
	}
	if t.role == oci.RoleContainer && t.pause != nil && !t.pause.rec.Docker {
		// Docker mode is a property of the sandbox, which the pod's
		// pause container booted.
		return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf(
			"container %s asks for docker mode but its pod %s runs without it: docker mode applies to the whole pod's sandbox; "+
				"set %s=true as a pod annotation (containerd pod_annotations) or [docker] enabled in the runtime handler's gvx config", r.ID, t.pod, api.AnnotationDocker))
	}
	dir := t.layout.Docker(r.Namespace, r.ID)
	if t.dockerProxied() {
		if t.network == api.NetworkNone {
			if err := t.noneOnNetstack(); err != nil {
				return err
			}
		}
		// The host reaches the inner dockerd through the shim's socket,
		// which hands each connection to the Sentry (dockerproxy.go),
		// whose gvx-relay in the guest relays it to dockerd.
		relay, err := t.relayCopy()
		if err != nil {
			return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("docker mode: %w", err))
		}
		ln, err := publishDocker(r, dir)
		if err != nil {
			return err
		}
		t.docker = &dockerProxy{ln: ln, id: r.ID}
		oci.EnableDocker(t.spec, "")
		nat := t.network == api.NetworkNAT
		if nat {
			// No port forwarding on the NAT's gVisor network ("none"):
			// the NAT publishes gvx-relay's guest port on a socket of
			// the shim's directory, which the proxy connects to.
			sock := t.layout.DockerRelaySocket(r.Namespace, r.ID)
			if err := t.publishRelayNAT(sock); err != nil {
				return err
			}
			t.docker.relay = sock
		}
		oci.DockerRelay(t.spec, relay, nat)
		t.flags = append(t.flags, oci.DockerProxySentryFlags...)
		return nil
	}
	// The host reaches the inner dockerd through a socket the sandbox
	// creates in this directory, owned by the sandbox's host uid.
	if err := r.makeDir(dir, 0o700, int(t.mapping.HostUID), int(t.mapping.HostGID)); err != nil {
		return err
	}
	oci.EnableDocker(t.spec, dir)
	t.flags = append(t.flags, oci.DockerSentryFlags...)
	return nil
}

// dockerProxied says whether the task's dockerd is published through the
// shim (a sandbox of its own on gVisor's netstack, which gVisor's port
// forwarding needs — network "sandbox", or "none" in a new network
// namespace (noneOnNetstack) — or on gvx's NAT, which publishes the
// guest's port) rather than as a host socket the guest creates: pool
// sandboxes boot before their task, pod members share one, and gVisor
// forwards no port on its network "none".
func (t *gvxTask) dockerProxied() bool {
	if t.role != oci.RoleNone || t.cfg.Pool.Size != 0 {
		return false
	}
	return t.network == api.NetworkSandbox || t.network == api.NetworkNAT || t.network == api.NetworkNone && oci.FreshNetNS(t.spec)
}

// publishRelayNAT has the task's NAT publish gvx-relay's guest port on
// unix socket sock (in the shim's docker directory, root's alone), added
// to the NAT settings on the spec and, for its removal at release, to the
// record.
func (t *gvxTask) publishRelayNAT(sock string) error {
	n, err := api.DecodeNAT(t.spec.Annotations[api.AnnotationNAT])
	if err != nil {
		return grpcError(errdefs.ErrInvalidArgument, fmt.Errorf("docker mode on the NAT: %w", err))
	}
	n.Ports = append(n.Ports, fmt.Sprintf("unix:%s:%d", sock, oci.DockerGuestPort))
	n.Owner = append(n.Owner, api.Owner{Path: sock, UID: 0, GID: 0})
	enc, err := api.EncodeNAT(n)
	if err != nil {
		return err
	}
	t.spec.Annotations[api.AnnotationNAT] = enc
	t.rec.Sockets = append(t.rec.Sockets, sock)
	return t.rec.save()
}

// adoptPool claims a warm pool's sandbox when the task can run in one
// (adopt.Blocker), and points the spec at it.
func (t *gvxTask) adoptPool(ctx context.Context) error {
	r := t.rec
	if t.role == oci.RoleContainer && t.pause != nil && t.pause.rec.Adopted && t.pause.rec.Sandbox != nil {
		// The pod's sandbox container adopted a pool sandbox: the pod's
		// containers join that one, under its id.
		t.spec.Annotations[api.CRISandboxID] = t.pause.rec.Sandbox.ID
		return nil
	}
	if t.restoring != nil {
		// A checkpoint restores into a sandbox of its own: of the same
		// shape as the one it was saved in.
		if t.restoring.Root != nil {
			return t.restoreRoot(ctx)
		}
		return nil
	}
	why := adopt.Blocker(t.cfg, t.spec, t.role, t.rootVol != nil)
	if why == "" && t.network != t.cfg.Network {
		why = "it asks for network " + t.network + ", not the pool's " + t.cfg.Network
	}
	if why == "" && t.network == api.NetworkNAT {
		// The pool's sandboxes have the config's NAT: ports, policy.
		if def, err := oci.DefaultNAT(t.cfg.NAT); err != nil || t.spec.Annotations[api.AnnotationNAT] != def {
			why = "it has NAT settings of its own (" + api.AnnotationNAT + "), not the pool's"
		}
	}
	if why == "" && t.rootfsSize > 0 && !slices.Contains(t.cfg.SentryFlags, api.RootfsSizeFlag(t.rootfsSize)) {
		why = "its root filesystem has a size cap (a setting of the sandbox's boot)"
	}
	if why != "" {
		if t.cfg.Pool.Size > 0 {
			log.G(ctx).Infof("gvx shim: %s boots its own sandbox: %s", r.ID, why)
		}
		return nil
	}
	r.Owner = newOwner(r.Namespace, r.ID)
	if err := r.save(); err != nil {
		return err
	}
	sb := claim(ctx, t.cfg, r.Sentry, r.ID, r.Owner, r.Docker)
	if sb == nil {
		return nil
	}
	r.Sandbox, r.Adopted = sb, true
	if err := r.save(); err != nil {
		return err
	}
	if t.role == oci.RolePause {
		why = adopt.PauseBlocker(sb, r.Docker)
	} else {
		why = adopt.ProcessBlocker(t.spec, t.rootfs, sb, t.vols != nil, r.Docker)
	}
	if why != "" && (sb.Pool != nil && sb.Pool.Image != "" || t.role == oci.RolePause) {
		log.G(ctx).Infof("gvx shim: %s runs as a container in pool sandbox %s: %s", r.ID, sb.ID, why)
	}
	r.PoolProcess = why == ""
	if r.PoolProcess && t.role == oci.RolePause {
		adopt.PauseProcess(t.spec, sb)
	}
	r.SandboxCgroup = sb.Cgroup
	if t.role == oci.RolePause {
		if err := t.enterPodCgroup(ctx, sb); err != nil {
			return err
		}
	}
	enterPoolSandbox(t.spec, sb, r.PoolProcess, t.resettable())
	t.startUTS(ctx, sb)
	if t.role == oci.RolePause && t.network == api.NetworkSandbox {
		// gvx-sentry gives the running sandbox the pod's interfaces.
		if ns := oci.NetnsPath(t.spec); ns != "" {
			t.spec.Annotations[api.AnnotationPodNetns] = ns
		}
	}
	t.flags = strings.Fields(sb.Flags)
	if t.vols != nil {
		// The container's volumes are its alone (see prepareVolumes).
		t.flags = append(t.flags, "--file-access-mounts=exclusive")
	}
	return nil
}

// addHook makes gvx-hook bring up the loopback interface of a sandbox the
// task boots.
func (t *gvxTask) addHook(context.Context) error {
	if t.hook != "" && !t.rec.Adopted && t.role != oci.RoleContainer {
		oci.AddCreateRuntimeHook(t.spec, t.hook, api.HookLoopback)
	}
	return nil
}

// linkSentry gives the task its own link to gvx-sentry with its flags.
// Tasks in a running sandbox (an adopted pool sandbox, a pod's application
// containers) have monitors gvx-runtime talks to.
func (t *gvxTask) linkSentry(context.Context) error {
	r := t.rec
	r.BinDir = t.layout.TaskDir(r.Namespace, r.ID)
	if err := r.save(); err != nil {
		return err
	}
	flags := t.flagString()
	if t.restoring != nil && t.restoring.Flags != flags {
		return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf(
			"checkpoint %s was saved by a sandbox with gvx-sentry flags %q; this task's would be %q: restore it with the runtime configuration it was checkpointed with",
			t.checkpointDir, t.restoring.Flags, flags))
	}
	t.front = r.Adopted || t.role == oci.RoleContainer
	t.createFront = !t.front && mountsPrivately(t.spec)
	binary, err := taskSentry(r.BinDir, r.Sentry, flags, t.front || t.createFront)
	t.binary = binary
	if err == nil && t.relay != "" {
		if err := os.WriteFile(filepath.Join(r.BinDir, api.RelayDigestFile), []byte(t.relay), 0o600); err != nil {
			return fmt.Errorf("record the task's gvx-relay: %w", err)
		}
	}
	return err
}

// prepareRootfs makes the root filesystem reachable by the sandbox's
// unprivileged gofer: mounted (idmapped) under gvx's state directory, left
// to gvx-sentry (an ext4 image), or not needed (a process in an image
// pool's sandbox, which runs on the same image).
func (t *gvxTask) prepareRootfs(ctx context.Context) error {
	r := t.rec
	dir := t.layout.Rootfs(r.Namespace, r.ID)
	switch {
	case r.PoolProcess:
		t.req.Rootfs = nil
	case t.rootVol != nil:
		// gvx-sentry mounts it here in the sandbox's mount namespace; on
		// the host this stays an empty, traverse-only directory.
		r.Rootfs = dir
		if err := r.save(); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return fmt.Errorf("create rootfs dir: %w", err)
		}
		t.spec.Root.Path, t.req.Rootfs = dir, nil
	case len(t.rootfs) > 0:
		// Under gvx's own state directory rather than in the bundle: the
		// sandbox's unprivileged gofer must reach it, and containerd's
		// state directory need not be traversable by it.
		r.Rootfs = dir
		if err := r.save(); err != nil {
			return err
		}
		t0 := time.Now()
		err := mountRootfs(ctx, t.rootfs, dir, t.mapping, t.spec.Mounts)
		t.tRootfs = time.Since(t0)
		if err != nil {
			return errgrpc.ToGRPC(err)
		}
		if err := t.inlineResolvConf(ctx, dir); err != nil {
			return err
		}
		t.spec.Root.Path, t.req.Rootfs = dir, nil
	default:
		root := t.spec.Root.Path
		if !filepath.IsAbs(root) {
			root = filepath.Join(r.Bundle, root)
		}
		if err := checkTraversable(root, t.mapping.HostUID); err != nil {
			return grpcError(errdefs.ErrFailedPrecondition, err)
		}
	}
	return nil
}

// writeSpec replaces the bundle's spec with the rewritten one.
func (t *gvxTask) writeSpec(context.Context) error { return oci.WriteSpec(t.rec.Bundle, t.spec) }

// prepareSentryRoot gives the sandbox its own sentry root — the task's,
// its pod's (the pause container's id is the pod's), or an adopted pool
// sandbox's, linked there — records the sandbox the task owns, and points
// containerd's runc task service at the task's gvx-sentry and root.
func (t *gvxTask) prepareSentryRoot(context.Context) error {
	r := t.rec
	r.RuncRoot = t.layout.SentryRoot(r.ID)
	if t.role == oci.RoleContainer && t.pod != "" {
		r.RuncRoot = t.layout.SentryRoot(t.pod)
	}
	root := api.SentryRoot(filepath.Join(r.RuncRoot, r.Namespace))
	switch {
	case r.Adopted:
		r.PoolLink = string(root)
	case t.role == oci.RoleContainer:
		r.PodRoot, r.Cgroup = root, t.spec.Linux.CgroupsPath
		if t.pause != nil && t.pause.rec.Sandbox != nil {
			r.SandboxCgroup = t.pause.rec.Sandbox.Cgroup
		}
	default:
		r.Sandbox = &sandbox.Sandbox{ID: r.ID, Root: root, PidFile: filepath.Join(r.Bundle, process.InitPidFile),
			Cgroup: t.spec.Linux.CgroupsPath, Flags: t.flagString()}
	}
	if err := r.save(); err != nil {
		return err
	}
	if r.Adopted {
		if err := linkPoolRoot(r.RuncRoot, r.Namespace, r.Sandbox); err != nil {
			return err
		}
	}
	opts, err := typeurl.MarshalAnyToProto(&options.Options{BinaryName: t.binary, Root: r.RuncRoot})
	if err != nil {
		return err
	}
	t.req.Options = opts
	return nil
}

// restoreCgroup gives a task restored under another id than the one it
// was checkpointed as a cgroup of its own: containerd restores the
// checkpointed spec as it was, whose cgroup path (containerd's
// /<namespace>/<id>) names the original task — which may still run, and
// whose sandbox's cgroup is its alone.
func (t *gvxTask) restoreCgroup() {
	l := t.spec.Linux
	if t.restoring == nil || t.restoring.Task == t.rec.ID || l == nil || path.Base(l.CgroupsPath) != t.restoring.Task {
		return
	}
	l.CgroupsPath = path.Join(path.Dir(l.CgroupsPath), t.rec.ID)
}

// restoreVolume puts the volume at destination (image) back as the
// checkpoint the task restores from holds it.
func (t *gvxTask) restoreVolume(ctx context.Context, destination, image string) error {
	return restoreVolume(ctx, t.restoring, t.checkpointDir, destination, image)
}

// restoreVolume puts the volume at destination (image) back as checkpoint
// m, in image directory dir, holds it.
func restoreVolume(ctx context.Context, m *checkpoint.Manifest, dir, destination, image string) error {
	v, ok := m.Volume(destination)
	if !ok {
		return fmt.Errorf("restore from %s: the checkpoint has no volume at %s; restore into a task with the volumes it was checkpointed with", dir, destination)
	}
	if v.File == "" {
		return nil // read-only then
	}
	return checkpoint.RestoreVolume(ctx, filepath.Join(dir, v.File), image)
}

// flagString is the task's gvx-sentry global flags as gvx-sentry reads
// them.
func (t *gvxTask) flagString() string { return strings.Join(t.flags, " ") }

// release undoes everything the task set up (record.release) and drops
// its volume leases.
func (t *gvxTask) release(ctx context.Context) {
	if t.docker != nil {
		t.docker.close()
	}
	if t.fwd != nil {
		if err := t.fwd.Close(); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx shim: %s: close port forwarding", t.req.ID)
		}
	}
	t.rec.release(ctx)
	t.vols.release(ctx)
}
