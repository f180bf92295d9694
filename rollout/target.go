package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/checkpoint"
)

// Restore targets (Options.NoTargets turns them off). A restore on demand
// creates a containerd container and task, boots a sandbox and then loads
// the checkpoint into it; the boot does not depend on the checkpoint. So
// once a sandbox has a checkpoint, the engine keeps restore targets for
// its lineage (Options.Targets, default one): a container and task
// created from the lineage's spec whose sandbox has booted, created but
// not started (the shim's api.AnnotationRestoreTarget). A rollback or
// fork without a ready spare takes it, names the handle (a task Update)
// and starts it: gVisor's restore into the booted sandbox. Unlike a
// spare, a target does not wait for a save and serves whichever handle
// of the lineage comes next; it costs an idle sandbox's memory, not a
// restored one's. Targets are for sandboxes of their own (targetable): a
// NAT sandbox's target gets its NAT and eth0 at its create, a docker-mode
// one its gvx-relay and docker socket; read-write ext4lite volumes are
// staged empty, and the shim puts the checkpoint's copies in place when
// the target is named a checkpoint, which gvx-sentry mounts in the booted
// sandbox before gVisor's restore. Other lineages restore on demand.

// targetRole is LabelRole's value on a restore target.
const targetRole = "target"

// targetable says why handle h's sandbox cannot be restored into a
// target ("" if it can): what the shim puts in place from the checkpoint
// before the sandbox boots (an ext4 root filesystem, a pool's root
// container) a target's early boot cannot have. Read-write
// ext4lite volumes are mounted into the booted target at its start
// instead; a read-only one is the original image, not a copy.
func (e *Engine) targetable(h *Handle) (string, error) {
	m, err := checkpoint.ReadManifest(e.store.ImageDir(h.ID))
	if err != nil {
		return "", err
	}
	switch {
	case slices.ContainsFunc(m.Volumes, func(v checkpoint.Volume) bool { return v.File == "" || v.Destination == "/" }):
		return "it has a read-only ext4lite volume or an ext4 root filesystem", nil
	case m.Root != nil:
		return "it ran in a warm pool's sandbox", nil
	}
	return "", nil
}

// fillTarget makes, in the background, restore targets for h's lineage
// until the engine keeps Options.Targets of them, unless the lineage
// cannot have one.
func (e *Engine) fillTarget(ctx context.Context, h *Handle) {
	if e.opts.NoTargets {
		return
	}
	l := h.Lineage
	e.mu.Lock()
	missing := 0
	if !e.closed && !e.untargetable[l] {
		missing = e.opts.Targets - len(e.targets[l]) - e.targeting[l]
	}
	if missing > 0 {
		e.targeting[l] += missing
	}
	e.mu.Unlock()
	for i := 0; i < missing; i++ {
		e.background(ctx, "make a restore target for "+l, func(ctx context.Context) error {
			b, why, err := e.makeTarget(ctx, h, e.newID(l))
			e.mu.Lock()
			if e.targeting[l]--; e.targeting[l] <= 0 {
				delete(e.targeting, l)
			}
			// Not kept once the lineage's last sandbox is gone.
			keep := err == nil && why == "" && !e.closed && len(e.targets[l]) < e.opts.Targets && e.live[l] > 0
			if keep {
				e.targets[l] = append(e.targets[l], b)
			}
			if why != "" {
				e.untargetable[l] = true
			}
			e.filled.Broadcast() // takeTarget may wait for it
			e.mu.Unlock()
			switch {
			case why != "":
				log.G(ctx).Debugf("gvx rollout: no restore target for %s: %s; its rollbacks restore on demand", l, why)
				return nil
			case err != nil:
				return err
			case !keep:
				return e.destroy(ctx, b)
			}
			log.G(ctx).Debugf("gvx rollout: restore target %s of %s ready", b.id, l)
			return nil
		})
	}
}

// makeTarget creates restore target id for h's lineage: h's spec as a
// restore target's, its container and task created (the sandbox booted),
// not started. why says why h's sandbox cannot have one (then no error
// and no backing).
func (e *Engine) makeTarget(ctx context.Context, h *Handle, id string) (_ *backing, why string, retErr error) {
	if why, err := e.targetable(h); why != "" || err != nil {
		return nil, why, err
	}
	spec, err := e.backingSpec(h, id)
	if err != nil {
		return nil, "", fmt.Errorf("restore target %s: %w", id, err)
	}
	spec.Annotations[api.AnnotationRestoreTarget] = "true"
	b := &backing{id: id, out: &gate{}, restored: true, volDir: e.store.volumeDir(id)}
	defer func() {
		if retErr != nil {
			_ = e.destroy(ctx, b)
		}
	}()
	if err := e.ownVolumes(ctx, spec, id); err != nil {
		return nil, "", fmt.Errorf("restore target %s: %w", id, err)
	}
	if err := e.create(ctx, h, b, spec, map[string]string{LabelRole: targetRole, labelLineage: h.Lineage, LabelOwner: owner, labelVolumes: b.volDir}); err != nil {
		if errdefs.IsFailedPrecondition(err) {
			// The shim refuses what it cannot restore into a target (a
			// runtime configuration with a warm pool, …): it says why.
			if derr := e.destroy(ctx, b); derr != nil {
				log.G(ctx).WithError(derr).Warnf("gvx rollout: remove the refused restore target %s", id)
			}
			return nil, err.Error(), nil
		}
		return nil, "", fmt.Errorf("restore target %s: %w", id, err)
	}
	return b, "", nil
}

// takeTarget takes a ready restore target of lineage; while none is ready
// but one is being made, it waits for that one (a restore on demand would
// do the same work from the start, competing with it for the CPU); nil if
// none is ready or coming, or ctx ends first.
func (e *Engine) takeTarget(ctx context.Context, lineage string) *backing {
	stop := context.AfterFunc(ctx, func() {
		e.mu.Lock()
		e.filled.Broadcast()
		e.mu.Unlock()
	})
	defer stop()
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(e.targets[lineage]) == 0 && e.targeting[lineage] > 0 && !e.closed && ctx.Err() == nil {
		e.filled.Wait()
	}
	list := e.targets[lineage]
	if len(list) == 0 {
		return nil
	}
	b := list[0]
	if len(list) == 1 {
		delete(e.targets, lineage)
	} else {
		e.targets[lineage] = list[1:]
	}
	return b
}

// aimTarget restores handle h into restore target b — the shim told the
// image (a task Update), then the task started — and pauses it, as a
// spare is.
func (e *Engine) aimTarget(ctx context.Context, b *backing, h *Handle) error {
	if err := b.task.Update(ctx, client.WithAnnotations(map[string]string{api.AnnotationRestoreImage: e.store.ImageDir(h.ID)})); err != nil {
		return fmt.Errorf("restore %s into target %s: %w", h.ID, b.id, err)
	}
	if err := b.task.Start(ctx); err != nil {
		return fmt.Errorf("restore %s into target %s: %w", h.ID, b.id, err)
	}
	if err := e.pause(ctx, b); err != nil {
		return fmt.Errorf("restore %s into target %s: %w", h.ID, b.id, err)
	}
	return nil
}

// fromTarget returns a paused backing restored from h into a restore
// target of the lineage, if one is ready (nil, without error, if none is
// or the target failed: the caller restores on demand then); it has a new
// target made.
func (e *Engine) fromTarget(ctx context.Context, h *Handle) *backing {
	b := e.takeTarget(ctx, h.Lineage)
	if b == nil {
		return nil
	}
	defer e.fillTarget(ctx, h)
	if err := e.aimTarget(ctx, b, h); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx rollout: restore target %s failed; restoring %s on demand", b.id, h.ID)
		_ = e.destroy(ctx, b)
		return nil
	}
	return b
}

// dropTarget destroys the restore targets of lineage the engine keeps.
func (e *Engine) dropTarget(ctx context.Context, lineage string) error {
	e.mu.Lock()
	list := e.targets[lineage]
	delete(e.targets, lineage)
	e.mu.Unlock()
	var errs []error
	for _, b := range list {
		errs = append(errs, e.destroy(ctx, b))
	}
	return errors.Join(errs...)
}

// Target is the container id of the next restore target the engine
// keeps ready for lineage ("" if none): a sandbox's lineage is
// Sandbox.Lineage.
func (e *Engine) Target(lineage string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if list := e.targets[lineage]; len(list) > 0 {
		return list[0].id
	}
	return ""
}

// Targets is how many restore targets the engine keeps ready for lineage.
func (e *Engine) Targets(lineage string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.targets[lineage])
}
