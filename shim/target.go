package shim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/checkpoint"
)

// target is a restore target's state (api.AnnotationRestoreTarget): a task
// whose create boots its sandbox, and whose Start restores into it the
// checkpoint an Update named (api.AnnotationRestoreImage) — gVisor's
// restore of a created container — instead of starting the container. A
// restore on demand pays for the sandbox's boot (and containerd's
// container and task) inside the restore; a target pays for them before
// the checkpoint it will hold is known.
// The checkpoint named is the task's checkpointDir (and restoring), set
// under mu.
type target struct {
	mu      sync.Mutex
	started bool
	// vols are its ext4lite volumes, staged (each with its destination
	// and the image the checkpoint's copy goes to) but not mounted: its
	// gofer bound their empty staging directories at its boot, and
	// gvx-sentry mounts the checkpoint's copies on them at its start.
	vols []api.Volume
}

// checkTarget refuses a restore target gvx cannot restore into: its
// sandbox must be its own, booted by its create, with nothing a restore
// puts in place before the sandbox boots (an ext4 root filesystem). A
// NAT sandbox's create starts its NAT and gives it its eth0, which its
// restore keeps; its ext4lite volumes are staged empty and mounted at its
// start (aimVolumes); in docker mode its create mounts the host's
// gvx-relay (the checkpoint must name the same) and publishes dockerd's
// socket, and its start makes dockerd's bridges again, as any restore's.
func (t *gvxTask) checkTarget(context.Context) error {
	if t.target == nil {
		return nil
	}
	why := ""
	switch {
	case t.rootVol != nil:
		why = "it has an ext4 root filesystem, which a restore clones from the checkpoint before the sandbox boots"
	case t.cfg.Pool.Size != 0:
		why = "its runtime configuration has a warm pool, and a target boots a sandbox of its own"
	}
	if why == "" {
		return nil
	}
	return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("task %s cannot be a restore target (%s=true): %s; restore it on demand instead (%s, or containerd's checkpoint restore)",
		t.rec.ID, api.AnnotationRestoreTarget, why, api.AnnotationRestoreFrom))
}

// Update names the checkpoint a restore target restores at its Start
// (annotation api.AnnotationRestoreImage); the rest of the request is the
// runc task service's (the task's resources).
func (s *service) Update(ctx context.Context, r *task.UpdateTaskRequest) (*emptypb.Empty, error) {
	image, ok := r.Annotations[api.AnnotationRestoreImage]
	if !ok {
		return s.TTRPCTaskService.Update(ctx, r)
	}
	t := s.task(r.ID)
	if t == nil || t.target == nil {
		return nil, grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("task %s was not created as a restore target: annotation %s applies only to a task whose spec has %s=true", r.ID, api.AnnotationRestoreImage, api.AnnotationRestoreTarget))
	}
	if err := t.aim(ctx, image); err != nil {
		return nil, err
	}
	if r.Resources == nil {
		return &emptypb.Empty{}, nil
	}
	return s.TTRPCTaskService.Update(ctx, r)
}

// aim has restore target t restore the checkpoint in image directory dir
// at its Start: the checkpoint must be one the target's sandbox can hold
// (saved with the same gvx-sentry flags, of a sandbox of its own, in the
// same docker mode with the same gvx-relay, with the volumes the target
// staged — what checkTarget allowed at create); its volumes are put in
// place now (aimVolumes).
func (t *gvxTask) aim(ctx context.Context, dir string) error {
	t.target.mu.Lock()
	defer t.target.mu.Unlock()
	id := t.rec.ID
	if t.target.started {
		return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("restore target %s has started already: name its checkpoint before its Start", id))
	}
	m, err := checkpoint.ReadManifest(dir)
	if err != nil {
		return grpcError(errdefs.ErrInvalidArgument, fmt.Errorf("restore target %s: %w", id, err))
	}
	why := ""
	switch {
	case m.Flags != t.flagString():
		why = fmt.Sprintf("it was saved by a sandbox with gvx-sentry flags %q, and the target's are %q", m.Flags, t.flagString())
	case m.Root != nil:
		why = "it holds a warm pool sandbox's task, which restores into a pool-shaped sandbox"
	case !sameDestinations(m.Volumes, t.target.vols):
		why = fmt.Sprintf("it holds ext4lite volumes at %s, and the target has them at %s", volumePaths(m.Volumes), targetPaths(t.target.vols))
	case m.Docker && !t.rec.Docker:
		why = "it holds a docker-mode sandbox, and the target is not in docker mode"
	case m.Relay != "" && m.Relay != t.relay:
		why = fmt.Sprintf("its guest runs gvx-relay %.12s, and the target mounted %.12s (the host's gvx-relay changed since)", m.Relay, t.relay)
	}
	if why != "" {
		return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("restore target %s cannot hold checkpoint %s: %s; restore it on demand (%s)", id, dir, why, api.AnnotationRestoreFrom))
	}
	if t.rec.Sandbox == nil {
		return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("restore target %s has no sandbox of its own", id))
	}
	if err := t.aimVolumes(ctx, m, dir); err != nil {
		return err
	}
	if err := api.WriteFile(t.rec.Sandbox.Root.RestoreTarget(id), []byte(dir+"\n"), 0o600); err != nil {
		return fmt.Errorf("restore target %s: %w", id, err)
	}
	t.restoring, t.checkpointDir = m, dir
	log.G(ctx).Debugf("gvx shim: restore target %s will restore %s", id, dir)
	return nil
}

// startTarget is a restore target's part of its Start: refused before a
// checkpoint was named (Update), and no more Updates after it.
func (t *gvxTask) startTarget() error {
	if t == nil || t.target == nil {
		return nil
	}
	t.target.mu.Lock()
	defer t.target.mu.Unlock()
	if t.checkpointDir == "" {
		return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("restore target %s has no checkpoint to restore: name one with a task Update whose annotation %s is its image directory, then start it", t.rec.ID, api.AnnotationRestoreImage))
	}
	t.target.started = true
	return nil
}

// aimVolumes puts restore target t's volumes in place from checkpoint m
// in image directory dir: each staged volume's image becomes a copy of
// the checkpoint's (reflinked where the filesystem can), is leased —
// checked, as every image is before the host kernel mounts it — and
// listed (api.SentryRoot.RestoreTargetVolumes) for gvx-sentry to mount
// inside the target's gofer at its start. A later aim replaces them.
func (t *gvxTask) aimVolumes(ctx context.Context, m *checkpoint.Manifest, dir string) (retErr error) {
	if len(t.target.vols) == 0 {
		return nil
	}
	id := t.rec.ID
	t.vols.release(ctx) // an earlier aim's
	t.vols, t.mounted = nil, nil
	tv := &taskVolumes{}
	defer func() {
		if retErr != nil {
			tv.release(ctx)
		}
	}()
	list := make([]api.Volume, 0, len(t.target.vols))
	var mounted []checkpoint.Mounted
	for _, v := range t.target.vols {
		if err := restoreVolume(ctx, m, dir, v.Destination, v.Image); err != nil {
			return fmt.Errorf("restore target %s: %w", id, err)
		}
		vol, mnt, err := tv.lease(ctx, v.Image, v.Staging, v.Destination, false)
		if err != nil {
			return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("restore target %s: %w", id, err))
		}
		vol.Destination = v.Destination
		list = append(list, vol)
		mounted = append(mounted, mnt)
	}
	if err := api.WriteJSON(t.rec.Sandbox.Root.RestoreTargetVolumes(id), list); err != nil {
		return fmt.Errorf("restore target %s: %w", id, err)
	}
	t.vols, t.mounted = tv, mounted
	return nil
}

// sameDestinations says whether checkpoint volumes saved are, one for one,
// the copies of a restore target's staged volumes: at the same
// destinations, each copied (not read-only).
func sameDestinations(saved []checkpoint.Volume, staged []api.Volume) bool {
	if len(saved) != len(staged) {
		return false
	}
	for _, v := range staged {
		i := slices.IndexFunc(saved, func(s checkpoint.Volume) bool { return s.Destination == v.Destination })
		if i < 0 || saved[i].File == "" {
			return false
		}
	}
	return true
}

// volumePaths lists the destinations of a checkpoint's volumes ("none"
// if it has none), read-only ones marked.
func volumePaths(vols []checkpoint.Volume) string {
	var out []string
	for _, v := range vols {
		if v.ReadOnly {
			out = append(out, v.Destination+" (read-only)")
		} else {
			out = append(out, v.Destination)
		}
	}
	return pathList(out)
}

// targetPaths lists the destinations of a target's staged volumes.
func targetPaths(vols []api.Volume) string {
	var out []string
	for _, v := range vols {
		out = append(out, v.Destination)
	}
	return pathList(out)
}

func pathList(paths []string) string {
	if len(paths) == 0 {
		return "none"
	}
	return strings.Join(paths, ", ")
}
