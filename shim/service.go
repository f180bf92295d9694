package shim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	runctask "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/task"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/containerd/ttrpc"
	"github.com/containerd/typeurl/v2"
	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/oci"
)

// sentryFlagsEnv must match gvx-sentry's launcher.FlagsEnv.
const sentryFlagsEnv = "GVX_SENTRY_FLAGS"

// sentryFlagsFile in a bundle records the flags a task was created with so
// that cleanup after a crash (Manager.Stop) runs the sentry the same way.
const sentryFlagsFile = "gvx-sentry-flags"

// service is the task service: containerd's runc task service, driving
// gvx-sentry, with gvx's preparation in front of Create and cleanup after
// Delete.
type service struct {
	task.TTRPCTaskService

	mu sync.Mutex
	// rootfs holds, per container id, the root filesystem gvx mounted.
	rootfs map[string]string
	// roots holds, per container id, the sentry state root of its sandbox.
	roots map[string]string
}

// NewTaskService returns gvx's task service.
func NewTaskService(ctx context.Context, publisher shim.Publisher, sd shutdown.Service) (task.TTRPCTaskService, error) {
	inner, err := runctask.NewTaskService(ctx, publisher, sd)
	if err != nil {
		return nil, err
	}
	return &service{TTRPCTaskService: inner, rootfs: map[string]string{}, roots: map[string]string{}}, nil
}

// RegisterTTRPC registers this service (not the inner one) on the server.
func (s *service) RegisterTTRPC(server *ttrpc.Server) error {
	task.RegisterTTRPCTaskService(server, s)
	return nil
}

// Create prepares the bundle for an unprivileged sandbox and creates it.
func (s *service) Create(ctx context.Context, r *task.CreateTaskRequest) (_ *task.CreateTaskResponse, retErr error) {
	cfg, err := configFromOptions(r.Options)
	if err != nil {
		return nil, errgrpc.ToGRPC(fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err))
	}
	if lvl, err := logrus.ParseLevel(cfg.LogLevel); err == nil && !log.GetLogger(ctx).Logger.IsLevelEnabled(logrus.DebugLevel) {
		log.GetLogger(ctx).Logger.SetLevel(lvl)
	}
	self, _ := os.Executable()
	sentry, err := cfg.SentryPath(self)
	if err != nil {
		return nil, errgrpc.ToGRPC(fmt.Errorf("%w: %v", errdefs.ErrFailedPrecondition, err))
	}
	spec, err := oci.ReadSpec(r.Bundle)
	if err != nil {
		return nil, errgrpc.ToGRPC(fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err))
	}
	mapping, err := oci.Prepare(spec, cfg)
	if err != nil {
		return nil, errgrpc.ToGRPC(fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err))
	}
	if err := oci.WriteSpec(r.Bundle, spec); err != nil {
		return nil, err
	}
	flags := strings.Join(cfg.SentryFlagList(), " ")
	if err := os.WriteFile(filepath.Join(r.Bundle, sentryFlagsFile), []byte(flags), 0o600); err != nil {
		return nil, fmt.Errorf("record sentry flags: %w", err)
	}
	os.Setenv(sentryFlagsEnv, flags)

	// The sandbox's gofer runs as the unprivileged host uid and must be able
	// to reach bundle/rootfs; containerd creates the bundle 0700. Traverse
	// only: the bundle's files keep their own modes.
	if err := os.Chmod(r.Bundle, 0o711); err != nil {
		return nil, fmt.Errorf("make bundle traversable: %w", err)
	}
	if len(r.Rootfs) > 0 {
		rootfs := filepath.Join(r.Bundle, "rootfs")
		if err := mountRootfs(ctx, r.Rootfs, rootfs, mapping, spec.Mounts); err != nil {
			return nil, errgrpc.ToGRPC(err)
		}
		defer func() {
			if retErr != nil {
				_ = mount.UnmountRecursive(rootfs, 0)
			}
		}()
		s.mu.Lock()
		s.rootfs[r.ID] = rootfs
		s.mu.Unlock()
		r.Rootfs = nil
	}

	group := groupOf(r.ID, spec.Annotations)
	opts, err := typeurl.MarshalAnyToProto(&options.Options{BinaryName: sentry, Root: sentryRoot(cfg.Root, group)})
	if err != nil {
		return nil, err
	}
	r.Options = opts
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(sentryRoot(cfg.Root, group), ns)
	resp, err := s.TTRPCTaskService.Create(ctx, r)
	if err != nil {
		s.forget(r.ID)
		if rerr := releaseSentryRoot(root); rerr != nil {
			log.G(ctx).WithError(rerr).Warn("gvx shim: release sentry root")
		}
		return nil, err
	}
	s.mu.Lock()
	s.roots[r.ID] = root
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
	rootfs, root := s.forget(r.ID)
	if rootfs != "" {
		if err := mount.UnmountRecursive(rootfs, 0); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx shim: unmount rootfs of %s", r.ID)
		}
	}
	if root != "" {
		if err := releaseSentryRoot(root); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx shim: release sentry root of %s", r.ID)
		}
	}
	return resp, nil
}

// forget drops what the service recorded for container id and returns its
// rootfs mount point and sentry root.
func (s *service) forget(id string) (rootfs, root string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rootfs, root = s.rootfs[id], s.roots[id]
	delete(s.rootfs, id)
	delete(s.roots, id)
	return rootfs, root
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
			return config.Config{}, fmt.Errorf("runc options (BinaryName %q, Root %q) do not apply to gvx: set `sentry`/`root` in the gvx config instead", o.BinaryName, o.Root)
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

// mountRootfs mounts the task's root filesystem at target, idmapped so that
// host root's files belong to the sandbox's root, and creates the mount
// points the spec's bind mounts need (the unprivileged gofer cannot).
func mountRootfs(ctx context.Context, rootfs []*typesMount, target string, m oci.Mapping, specMounts []specMount) error {
	if err := os.Mkdir(target, 0o711); err != nil && !os.IsExist(err) {
		return fmt.Errorf("create rootfs dir: %w", err)
	}
	mounts := make([]mount.Mount, 0, len(rootfs))
	for _, rm := range rootfs {
		opts := append([]string{}, rm.Options...)
		if rm.Type == "overlay" || rm.Type == "bind" || hasOpt(opts, "bind") || hasOpt(opts, "rbind") {
			opts = append(opts, m.IDMapOptions()...)
		}
		mounts = append(mounts, mount.Mount{Type: rm.Type, Source: rm.Source, Target: rm.Target, Options: opts})
	}
	if err := mount.All(mounts, target); err != nil {
		return fmt.Errorf("mount rootfs (idmapped to host uid %d): %w", m.HostUID, err)
	}
	for _, sm := range specMounts {
		if sm.Type != "bind" && !hasOpt(sm.Options, "bind") && !hasOpt(sm.Options, "rbind") {
			continue
		}
		if err := makeMountPoint(target, sm.Destination, sm.Source); err != nil {
			_ = mount.UnmountRecursive(target, 0)
			return err
		}
	}
	log.G(ctx).Debugf("gvx shim: rootfs mounted at %s", target)
	return nil
}

func makeMountPoint(rootfs, dest, src string) error {
	p, err := securejoin.SecureJoin(rootfs, dest)
	if err != nil {
		return fmt.Errorf("mount point %s: %w", dest, err)
	}
	if _, err := os.Lstat(p); err == nil {
		return nil
	}
	st, err := os.Stat(src)
	if err == nil && !st.IsDir() {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("mount point %s: %w", dest, err)
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("mount point %s: %w", dest, err)
		}
		return f.Close()
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		return fmt.Errorf("mount point %s: %w", dest, err)
	}
	return nil
}

func hasOpt(opts []string, o string) bool {
	for _, x := range opts {
		if x == o {
			return true
		}
	}
	return false
}

func restoreSentryEnv(bundle string) error {
	data, err := os.ReadFile(filepath.Join(bundle, sentryFlagsFile))
	if err != nil {
		return err
	}
	return os.Setenv(sentryFlagsEnv, string(data))
}
