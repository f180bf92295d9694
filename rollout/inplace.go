package rollout

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/checkpoint"
)

// labelLineage, on a container, names the lineage its checkpoints belong
// to (set at its first checkpoint; a fork's is its handle's).
const labelLineage = "dev.gvx.rollout.lineage"

// RollbackInPlace returns containerd container id — not a sandbox the
// engine keeps — to handle hid's state under its own id: its task is
// killed and deleted, and a new task restored from the handle is started
// on the same container with IO from creator. It costs a restore (no
// spare can stand in for a container by its id), and clients that know
// the container by its id (ctr, nerdctl, the containerd client) find the
// rolled-back task there. Its volumes are put back as the handle holds
// them. A handle whose image is damaged is refused with the task
// running; a restore that fails all the same (in gVisor) leaves the
// container without a task — the engine's Rollback, which restores a new
// backing first, keeps the old one then.
func (e *Engine) RollbackInPlace(ctx context.Context, id, hid string, creator cio.Creator) (time.Duration, error) {
	if err := e.Wait(ctx, hid); err != nil {
		return 0, fmt.Errorf("rollback %s: %w", id, err)
	}
	h, done, err := e.use(hid)
	if err != nil {
		return 0, fmt.Errorf("rollback %s: %w", id, err)
	}
	defer done()
	ctr, err := e.c.LoadContainer(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("rollback %s: %w", id, err)
	}
	labels, err := ctr.Labels(ctx)
	if err != nil {
		return 0, fmt.Errorf("rollback %s: %w", id, err)
	}
	if lineage := lineageOf(id, labels); lineage != h.Lineage {
		return 0, fmt.Errorf("rollback %s to %s: %w (made from %s)", id, hid, ErrForeignHandle, h.Sandbox)
	}
	// The task is deleted before its restore (the container takes one
	// task): an image the restore would refuse is refused first, with
	// the task running on.
	if _, err := checkpoint.ReadManifest(e.store.ImageDir(h.ID)); err != nil {
		return 0, fmt.Errorf("rollback %s to %s: %w", id, hid, err)
	}
	t0 := time.Now()
	// Loaded with its IO, so that its delete removes the fifos of the
	// client that created it (ctr's, which exited): the rolled-back task
	// gets new ones from creator.
	if task, err := ctr.Task(ctx, cio.Load); err == nil {
		if _, err := task.Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return 0, fmt.Errorf("rollback %s: delete its task: %w", id, err)
		}
	}
	if err := setRestoreFrom(ctx, ctr, e.store.ImageDir(h.ID)); err != nil {
		return 0, fmt.Errorf("rollback %s: %w", id, err)
	}
	// The spec is the container's again once the task has started (or
	// failed to): a later task of it boots afresh.
	defer func() { _ = setRestoreFrom(context.WithoutCancel(ctx), ctr, "") }()
	task, err := ctr.NewTask(ctx, creator)
	if err != nil {
		return 0, fmt.Errorf("rollback %s: %w", id, err)
	}
	if err := task.Start(ctx); err != nil {
		_, _ = task.Delete(ctx, client.WithProcessKill)
		return 0, fmt.Errorf("rollback %s: %w", id, err)
	}
	took := time.Since(t0)
	if _, err := ctr.SetLabels(ctx, map[string]string{labelParent: h.ID}); err != nil {
		return took, fmt.Errorf("rollback %s: %w", id, err)
	}
	return took, nil
}

// setRestoreFrom sets (or, with "", removes) the annotation that makes the
// shim restore the container's next task from image directory dir.
func setRestoreFrom(ctx context.Context, ctr client.Container, dir string) error {
	spec, err := ctr.Spec(ctx)
	if err != nil {
		return err
	}
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	// A backing restored into a restore target carries the target's
	// annotation from its create: its next task restores from dir.
	stripRestoreDirectives(spec)
	if dir != "" {
		spec.Annotations[api.AnnotationRestoreFrom] = dir
	}
	return ctr.Update(ctx, func(ctx context.Context, _ *client.Client, c *containers.Container) error {
		return client.WithSpec(spec)(ctx, nil, c)
	})
}

// lineageOf is the lineage of container id with labels.
func lineageOf(id string, labels map[string]string) string {
	if l := labels[labelLineage]; l != "" {
		return l
	}
	return id
}
