// Package shim is containerd-shim-gvx-v2, gvx's containerd shim.
//
// It is a containerd shim v2 (task API v3) that runs each task, or each
// pod, as one gVisor sandbox launched by gvx-sentry under an unprivileged
// host uid.
//
// Process state machines, stdio plumbing, exit reaping and event ordering
// come from containerd's runc shim, used as a library: gvx-sentry speaks the
// runc command line. What gvx adds sits around it: configuration, the spec
// rewrite that makes the sandbox unprivileged, idmapped root filesystems,
// clean teardown, and clear errors.
package shim

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/process"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/version"
	runcC "github.com/containerd/go-runc"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/shimstart"
)

// NewManager returns the shim.Shim containerd's shim bootstrap drives.
func NewManager() shim.Shim { return manager{} }

type manager struct{}

func (manager) Name() string { return api.RuntimeType }

// Start is containerd-shim-gvx-v2's (package shimstart), which launches
// this binary as the server; containerd runs this binary itself only
// through it.
func (manager) Start(context.Context, *bootapi.BootstrapParams) (*bootapi.BootstrapResult, error) {
	return nil, fmt.Errorf("%s start: run %s, which starts %s: give containerd that binary (runtime_path)", api.ShimServerBinary, api.ShimBinary, api.ShimServerBinary)
}

// Stop runs when containerd cleans up after a shim that is gone (crashed,
// killed, or exited after its last task): it force-deletes the sandbox,
// releases what the task's record names (the same release Delete uses),
// and reports the recorded exit status.
func (manager) Stop(ctx context.Context, id string) (shim.StopStatus, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return shim.StopStatus{}, err
	}
	bundle := filepath.Join(filepath.Dir(cwd), id)
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return shim.StopStatus{}, err
	}
	rec, err := loadRecord(bundle)
	if err != nil {
		log.G(ctx).WithError(err).Warn("gvx shim: read the task's record")
	}
	if rec != nil {
		// The task's own link to gvx-sentry, its flags beside it; the
		// shim removed it when it deleted the task itself.
		link := filepath.Join(rec.BinDir, sentryLinkName)
		if _, err := os.Lstat(link); err == nil && rec.RuncRoot != "" {
			r := process.NewRunc(rec.RuncRoot, bundle, ns, link, false)
			if err := r.Delete(ctx, id, &runcC.DeleteOpts{Force: true}); err != nil {
				log.G(ctx).WithError(err).Warn("gvx shim: force delete of sandbox failed")
			}
		}
		rec.release(ctx)
	}
	if err := shimstart.RemoveDeadSocket(bundle); err != nil {
		log.G(ctx).WithError(err).Warn("gvx shim: remove dead shim's socket")
	}
	if err := mount.UnmountRecursive(filepath.Join(bundle, "rootfs"), unix.MNT_DETACH); err != nil {
		log.G(ctx).WithError(err).Warn("gvx shim: unmount rootfs")
	}
	e, err := shimstart.RecordedExit(bundle)
	if err != nil {
		log.G(ctx).WithError(err).Warn("gvx shim: read recorded exit status")
	}
	return shim.StopStatus{ExitedAt: e.At, ExitStatus: e.Status, Pid: e.Pid}, nil
}

// Info reports the runtime's name, version and OCI features
// (runtimeFeatures), which containerd's CRI reads for what a runtime
// handler supports (recursive read-only mounts).
func (manager) Info(ctx context.Context, _ io.Reader) (*types.RuntimeInfo, error) {
	feat, err := typeurl.MarshalAnyToProto(runtimeFeatures())
	if err != nil {
		return nil, fmt.Errorf("marshal runtime features: %w", err)
	}
	return &types.RuntimeInfo{
		Name:     api.RuntimeType,
		Version:  &types.RuntimeVersion{Version: version.Version, Revision: version.Revision},
		Features: feat,
	}, nil
}
