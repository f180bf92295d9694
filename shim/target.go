package shim

import (
	"context"
	"fmt"
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
}

// checkTarget refuses a restore target gvx cannot restore into: its
// sandbox must be its own, booted by its create, with nothing a restore
// puts in place before the sandbox boots (volumes cloned from the
// checkpoint's copies, docker mode's relay and bridges). A NAT sandbox's
// create starts its NAT and gives it its eth0, which its restore keeps.
func (t *gvxTask) checkTarget(context.Context) error {
	if t.target == nil {
		return nil
	}
	why := ""
	switch {
	case t.vols != nil || t.rootVol != nil:
		why = "it has ext4lite volumes or an ext4 root filesystem, which a restore clones from the checkpoint before the sandbox boots"
	case t.rec.Docker:
		why = "it runs in docker mode"
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
// (saved with the same gvx-sentry flags, of a sandbox of its own, without
// volumes or docker mode — what checkTarget allowed at create).
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
	case len(m.Volumes) > 0:
		why = "it holds ext4lite volumes"
	case m.Docker:
		why = "it holds a docker-mode sandbox"
	}
	if why != "" {
		return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("restore target %s cannot hold checkpoint %s: %s; restore it on demand (%s)", id, dir, why, api.AnnotationRestoreFrom))
	}
	if t.rec.Sandbox == nil {
		return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("restore target %s has no sandbox of its own", id))
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
