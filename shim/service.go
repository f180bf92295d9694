package shim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	tasktypes "github.com/containerd/containerd/api/types/task"
	runctask "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/task"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oom"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/containerd/ttrpc"
	"github.com/containerd/typeurl/v2"
	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/types/known/emptypb"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/internal/cgroups"
	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/oci"
	"github.com/gvxrun/gvx/pool"
)

// rootfsFile in a bundle records where gvx mounted the task's rootfs.
const rootfsFile = "gvx-rootfs"

// service is the task service: containerd's runc task service, driving
// gvx-sentry, with gvx's preparation in front of Create and cleanup after
// Delete.
type service struct {
	task.TTRPCTaskService

	mu    sync.Mutex
	tasks map[string]*taskState // by container id
	// oom reports OOM events of the sandboxes of containers that run
	// inside one (see sandboxcg.go).
	oom oom.Watcher
}

// taskState is what gvx set up for one container and must undo when it is
// deleted.
type taskState struct {
	bundle string
	rootfs string       // rootfs mount point, if gvx mounted it
	root   string       // sentry state root of its sandbox
	cgroup string       // cgroup path of its spec
	vols   *taskVolumes // leased ext4lite volumes
	docker bool         // docker mode
	// pool is the warm-pool sandbox the task adopted (nil: its own), with
	// the gvx-sentry that destroys it and the task's root dir linking to it.
	pool     *pool.Sandbox
	sentry   string
	poolRoot string
	// poolProcess: the task is a process started in the pool sandbox's
	// root container, not a container inside it.
	poolProcess bool
	// binDir holds the task's link to gvx-sentry and its flags.
	binDir string
	// sandboxCgroup is the cgroup of the sandbox a container inside a
	// running sandbox (pool, pod) reports metrics from.
	sandboxCgroup string
}

// release undoes everything recorded in t (after the sandbox is gone).
func (t *taskState) release(ctx context.Context) {
	releasePool(ctx, t.sentry, t.pool, t.poolRoot, t.bundle)
	cgroups.Remove(ctx, t.cgroup)
	t.vols.release(ctx)
	removeTaskDirs(ctx, t.bundle)
	if t.rootfs != "" {
		releaseRootfs(ctx, t.rootfs)
	}
	if t.root != "" {
		if err := releaseSentryRoot(t.root); err != nil {
			log.G(ctx).WithError(err).Warn("gvx shim: release sentry root")
		}
	}
	if t.binDir != "" {
		if err := releaseTaskSentry(t.binDir); err != nil {
			log.G(ctx).WithError(err).Warn("gvx shim: release the task's gvx-sentry link")
		}
	}
}

// NewTaskService returns gvx's task service.
func NewTaskService(ctx context.Context, publisher shim.Publisher, sd shutdown.Service) (task.TTRPCTaskService, error) {
	inner, err := runctask.NewTaskService(ctx, publisher, sd)
	if err != nil {
		return nil, err
	}
	w, err := newOOMWatcher(ctx, publisher)
	if err != nil {
		log.G(ctx).WithError(err).Warn("gvx shim: no OOM events for containers inside a running sandbox")
	}
	return &service{TTRPCTaskService: inner, tasks: map[string]*taskState{}, oom: w}, nil
}

// RegisterTTRPC registers this service (not the inner one) on the server.
func (s *service) RegisterTTRPC(server *ttrpc.Server) error {
	task.RegisterTTRPCTaskService(server, s)
	return nil
}

// Create prepares the bundle for an unprivileged sandbox and creates it.
func (s *service) Create(ctx context.Context, r *task.CreateTaskRequest) (_ *task.CreateTaskResponse, retErr error) {
	t0 := time.Now()
	var tRootfs time.Duration
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
	clampOOMScore(ctx, spec)
	// A CRI pod is one sandbox: the pause container is its root container
	// (on the pod's network namespace) and each application container is
	// a container inside it, which gvx-sentry runs with a monitor process
	// standing for its init (see sentry/subcontainer).
	role, pod := oci.PodRole(spec)
	var pause *taskState // an application container's pod sandbox
	if role == oci.RoleContainer {
		s.mu.Lock()
		pause = s.tasks[pod]
		s.mu.Unlock()
	}
	mapping, err := oci.Prepare(spec, cfg)
	if err != nil {
		return nil, grpcError(errdefs.ErrInvalidArgument, err)
	}
	hook := ""
	if cfg.Network == "sandbox" {
		if hook, err = config.HookPath(sentry); err != nil {
			return nil, grpcError(errdefs.ErrFailedPrecondition, err)
		}
	}
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, err
	}
	ts := &taskState{bundle: r.Bundle, cgroup: spec.Linux.CgroupsPath, sentry: sentry}
	defer func() {
		if retErr != nil {
			ts.release(ctx)
		}
	}()
	rootfsDir := filepath.Join(cfg.RootfsDir(), ns, r.ID)
	rootVol := ext4Rootfs(r.Rootfs, rootfsDir)
	volDir := filepath.Join(cfg.StateDir, "volumes", ns, r.ID)
	vols, err := prepareVolumes(ctx, spec, r.Bundle, volDir, rootVol)
	if err != nil {
		return nil, grpcError(errdefs.ErrInvalidArgument, err)
	}
	ts.vols = vols
	flagList := cfg.SentryFlagList()
	if vols != nil || rootVol != nil {
		// The sandbox leases its volumes exclusively (containerd its
		// snapshots), so gVisor may cache their contents without
		// revalidating against the host.
		flagList = append(flagList, "--file-access-mounts=exclusive")
	}
	if rootVol != nil {
		// Writes go to the container's own ext4 clone, not to memory.
		flagList = append(flagList, "--overlay2=none")
	}
	docker, err := dockerMode(cfg, spec)
	if err != nil {
		return nil, grpcError(errdefs.ErrInvalidArgument, err)
	}
	ts.docker = docker
	if role == oci.RoleContainer && docker {
		// Docker mode is a property of the sandbox, which the pod's pause
		// container booted.
		if pause != nil && !pause.docker {
			return nil, grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf(
				"container %s asks for docker mode but its pod %s runs without it: docker mode applies to the whole pod's sandbox; "+
					"set dev.gvx.docker=true as a pod annotation (containerd pod_annotations) or [docker] enabled in the runtime handler's gvx config", r.ID, pod))
		}
	}
	if docker {
		// The host reaches the inner dockerd through a socket the sandbox
		// creates in this directory, owned by the sandbox's host uid.
		dir := filepath.Join(cfg.DockerDir(), ns, r.ID)
		if err := makeTaskDir(r.Bundle, dir, 0o700, int(mapping.HostUID), int(mapping.HostGID)); err != nil {
			return nil, err
		}
		oci.EnableDocker(spec, dir)
		flagList = append(flagList, oci.DockerSentryFlags...)
	}
	if why := poolBlocker(cfg, spec, role, rootVol != nil); why == "" {
		ts.pool = adopt(ctx, cfg, sentry, r.Bundle, r.ID, spec, docker)
		if ts.pool != nil {
			why := processBlocker(spec, r.Rootfs, ts.pool, vols != nil, docker)
			if why != "" && ts.pool.Image != "" {
				log.G(ctx).Infof("gvx shim: %s runs as a container in pool sandbox %s: %s", r.ID, ts.pool.ID, why)
			}
			ts.poolProcess = why == ""
			enterPoolSandbox(spec, ts.pool, ts.poolProcess)
			ts.cgroup = ""
			flagList = strings.Fields(ts.pool.Flags)
			if vols != nil {
				// The container's volumes are its alone (see above).
				flagList = append(flagList, "--file-access-mounts=exclusive")
			}
		}
	} else if cfg.Pool.Size > 0 {
		log.G(ctx).Infof("gvx shim: %s boots its own sandbox: %s", r.ID, why)
	}
	if hook != "" && ts.pool == nil && role != oci.RoleContainer {
		oci.AddCreateRuntimeHook(spec, hook, "--loopback")
	}
	flags := strings.Join(flagList, " ")
	ts.binDir = sentryRoot(cfg.SentryRoot(), r.ID)
	// Tasks in a running sandbox (an adopted pool sandbox, a pod's
	// application containers) have monitors gvx-runtime talks to.
	binary, err := taskSentry(ts.binDir, sentry, flags, ts.pool != nil || role == oci.RoleContainer)
	if err != nil {
		return nil, err
	}

	if ts.poolProcess {
		// The task's process starts in the pool sandbox's root container,
		// which runs on the same image: nothing to mount.
		r.Rootfs = nil
	} else if rootVol != nil {
		// gvx-sentry mounts it here in the sandbox's mount namespace; on
		// the host this stays an empty, traverse-only directory.
		if err := os.MkdirAll(rootfsDir, 0o711); err != nil {
			return nil, fmt.Errorf("create rootfs dir: %w", err)
		}
		ts.rootfs = rootfsDir
		if err := os.WriteFile(filepath.Join(r.Bundle, rootfsFile), []byte(rootfsDir), 0o600); err != nil {
			return nil, fmt.Errorf("record rootfs mount: %w", err)
		}
		spec.Root.Path = rootfsDir
		r.Rootfs = nil
	} else if len(r.Rootfs) > 0 {
		// Mount the rootfs under gvx's own state directory rather than in
		// the bundle: the sandbox's unprivileged gofer must reach it, and
		// containerd's state directory need not be traversable by it.
		rootfs := rootfsDir
		tm := time.Now()
		err := mountRootfs(ctx, r.Rootfs, rootfs, mapping, spec.Mounts)
		tRootfs = time.Since(tm)
		if err != nil {
			return nil, errgrpc.ToGRPC(err)
		}
		ts.rootfs = rootfs
		if err := os.WriteFile(filepath.Join(r.Bundle, rootfsFile), []byte(rootfs), 0o600); err != nil {
			return nil, fmt.Errorf("record rootfs mount: %w", err)
		}
		spec.Root.Path = rootfs
		r.Rootfs = nil
	} else {
		root := spec.Root.Path
		if !filepath.IsAbs(root) {
			root = filepath.Join(r.Bundle, root)
		}
		if err := checkTraversable(root, mapping.HostUID); err != nil {
			return nil, grpcError(errdefs.ErrFailedPrecondition, err)
		}
	}
	if err := oci.WriteSpec(r.Bundle, spec); err != nil {
		return nil, err
	}

	// Every sandbox gets its own sentry root: a task's own, its pod's (the
	// pause container's id is the pod's), or an adopted pool sandbox's,
	// linked there.
	root := sentryRoot(cfg.SentryRoot(), r.ID)
	if role == oci.RoleContainer && pod != "" {
		root = sentryRoot(cfg.SentryRoot(), pod)
	}
	if ts.pool != nil {
		ts.poolRoot = root
		if err := linkPoolRoot(root, ns, ts.pool); err != nil {
			return nil, err
		}
	}
	opts, err := typeurl.MarshalAnyToProto(&options.Options{BinaryName: binary, Root: root})
	if err != nil {
		return nil, err
	}
	r.Options = opts
	if ts.pool == nil {
		ts.root = filepath.Join(root, ns)
	}
	tPrep := time.Since(t0)
	resp, err := s.TTRPCTaskService.Create(ctx, r)
	if err != nil {
		return nil, err
	}
	log.G(ctx).Debugf("gvx shim: created %s in %s (preparation %s, of which rootfs mount %s; sandbox create %s)",
		r.ID, time.Since(t0), tPrep, tRootfs, time.Since(t0)-tPrep)
	switch {
	case ts.pool != nil:
		ts.sandboxCgroup = ts.pool.Cgroup
	case pause != nil:
		ts.sandboxCgroup = pause.cgroup
	}
	s.watchSandboxOOM(ctx, r.ID, ts.sandboxCgroup)
	s.mu.Lock()
	s.tasks[r.ID] = ts
	s.mu.Unlock()
	return resp, nil
}

// Delete deletes the process and, for a container's init, the root
// filesystem gvx mounted.
func (s *service) Delete(ctx context.Context, r *task.DeleteRequest) (*task.DeleteResponse, error) {
	resp, err := s.TTRPCTaskService.Delete(ctx, r)
	if err != nil || r.ExecID != "" {
		return resp, err
	}
	s.mu.Lock()
	ts := s.tasks[r.ID]
	delete(s.tasks, r.ID)
	s.mu.Unlock()
	if ts != nil {
		ts.release(ctx)
	}
	return resp, nil
}

// Stats reports a container's metrics; a container inside a running
// sandbox reports its sandbox's.
func (s *service) Stats(ctx context.Context, r *task.StatsRequest) (*task.StatsResponse, error) {
	s.mu.Lock()
	ts := s.tasks[r.ID]
	s.mu.Unlock()
	if ts == nil || ts.sandboxCgroup == "" {
		return s.TTRPCTaskService.Stats(ctx, r)
	}
	resp, err := sandboxStats(ts.sandboxCgroup)
	if err != nil {
		return nil, grpcError(errdefs.ErrNotFound, err)
	}
	return resp, nil
}

// Checkpoint of whole sandboxes comes with gvx's checkpoint/rollback work;
// until then it says so instead of failing obscurely inside the runc shim.
func (s *service) Checkpoint(ctx context.Context, r *task.CheckpointTaskRequest) (*emptypb.Empty, error) {
	return nil, errgrpc.ToGRPC(fmt.Errorf("gvx: checkpoint is not implemented yet: %w", errNotImplemented))
}

// configFromOptions reads the gvx config a runtime handler points at: CRI
// and `ctr --runtime-config-path` pass runtimeoptions.Options.
func configFromOptions(any typeurlAny) (config.Config, error) {
	if any == nil || any.GetValue() == nil && any.GetTypeUrl() == "" {
		return config.Load("")
	}
	v, err := typeurl.UnmarshalAny(any)
	if err != nil {
		return config.Config{}, fmt.Errorf("unknown runtime options %s: gvx takes runtimeoptions (ConfigPath) only: %w", any.GetTypeUrl(), err)
	}
	switch o := v.(type) {
	case *runtimeoptions.Options:
		if len(o.ConfigBody) > 0 {
			c, err := config.Parse(o.ConfigBody)
			if err != nil {
				return config.Config{}, fmt.Errorf("gvx config (ConfigBody): %w", err)
			}
			return c, nil
		}
		return config.Load(o.ConfigPath)
	case *options.Options:
		if o.BinaryName != "" || o.Root != "" {
			return config.Config{}, fmt.Errorf("runc options (BinaryName %q, Root %q) do not apply to gvx: set `sentry`/`state_dir` in the gvx config instead", o.BinaryName, o.Root)
		}
		return config.Load("")
	default:
		return config.Config{}, fmt.Errorf("unknown runtime options type %T: gvx takes runtimeoptions with ConfigPath", v)
	}
}

type typeurlAny interface {
	GetTypeUrl() string
	GetValue() []byte
}

// dockerMode decides whether the task runs in docker mode: the task's
// annotation wins over the runtime handler's config.
func dockerMode(cfg config.Config, spec *specs.Spec) (bool, error) {
	req, set, err := oci.DockerRequested(spec)
	if err != nil || set {
		return req, err
	}
	return cfg.Docker.Enabled, nil
}

// Kill signals a process. When the sandbox is already gone or going (it
// exited, or was killed from outside), gVisor answers "sandbox is not
// running" or cannot reach the sandbox's control server; containerd
// expects NotFound then (clients such as nerdctl forward signals after
// exit, and Delete(WithProcessKill) kills again), not an unknown error.
func (s *service) Kill(ctx context.Context, r *task.KillRequest) (*emptypb.Empty, error) {
	resp, err := s.TTRPCTaskService.Kill(ctx, r)
	if err == nil {
		return resp, nil
	}
	gone := strings.Contains(err.Error(), "is not running")
	if !gone {
		st, serr := s.TTRPCTaskService.State(ctx, &task.StateRequest{ID: r.ID, ExecID: r.ExecID})
		gone = serr == nil && (st.Status == tasktypes.Status_STOPPED || r.ExecID == "" && !procfs.Alive(int(st.Pid)))
	}
	if gone {
		return nil, errgrpc.ToGRPC(fmt.Errorf("process already finished: %w", errdefs.ErrNotFound))
	}
	return resp, err
}

// grpcError reports err to containerd as an error of kind (an errdefs
// class), keeping its message.
func grpcError(kind, err error) error {
	return errgrpc.ToGRPC(fmt.Errorf("%w: %v", kind, err))
}
