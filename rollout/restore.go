package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"

	"github.com/containerd/containerd/v2/core/containers"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/oci"
)

type specsMount = specs.Mount

// Labels on the containers the engine restores.
const (
	labelHandle = "dev.gvx.rollout.handle" // the handle restored
	// labelVolumes names the directory of a restored container's volume
	// copies (its store's: a later process may use another store).
	labelVolumes = "dev.gvx.rollout.volumes"
	// LabelRole marks the containers the engine restores: "spare" or
	// "sandbox".
	LabelRole = "dev.gvx.rollout.role"
	// LabelSandbox, on a restored container that became a sandbox's
	// backing (a rollback's or a fork's), names that sandbox: a later
	// process finds the sandbox by it (FindBacking) and adopts it under
	// that id. Such a backing carries its sandbox's other labels too (a
	// rollback's, those of the backing it replaced; a fork's, those of the
	// container checkpointed, as Options.ForkLabel keeps them).
	LabelSandbox = "dev.gvx.rollout.sandbox"
	// LabelOwner, on a container the engine restores (a spare, a restore
	// target, a backing until it is a sandbox's), names the process whose
	// engine made it (procfs.Identity): one whose owner is gone and that
	// is no sandbox's is garbage (Orphaned; the janitor removes it).
	LabelOwner = "dev.gvx.rollout.owner"
)

// owner is this process's identity, for LabelOwner.
var owner = procfs.Identity(os.Getpid())

// Orphaned reports whether a container with labels is one the engine
// restored that is no sandbox's backing and whose engine's process is
// gone: a spare or restore target left by a process that died.
func Orphaned(labels map[string]string) bool {
	o := labels[LabelOwner]
	return labels[LabelRole] != "" && labels[LabelSandbox] == "" && o != "" && !procfs.Running(o)
}

// RestoredVolumes is the directory of the volume copies of a container
// the engine restored ("" if none).
func RestoredVolumes(labels map[string]string) string { return labels[labelVolumes] }

// labelParent, on a sandbox's backing, names the handle its state
// descends from (its last checkpoint, or the handle it was rolled back or
// forked to): a later process adopting it goes on with the tree there.
const labelParent = "dev.gvx.rollout.parent"

// engineLabel says whether container label k is one the engine sets.
func engineLabel(k string) bool {
	return k == labelHandle || k == LabelRole || k == LabelSandbox || k == labelLineage || k == labelVolumes || k == labelParent || k == LabelOwner
}

// ownLabels is labels without the engine's.
func ownLabels(labels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		if !engineLabel(k) {
			out[k] = v
		}
	}
	return out
}

// promote labels restored backing b as sandbox id's, descending from
// handle parent, with labels (its sandbox's own) besides: a later process
// finds it by them.
func (e *Engine) promote(ctx context.Context, b *backing, id, parent string, labels map[string]string) error {
	set := map[string]string{LabelRole: "sandbox", LabelSandbox: id, labelParent: parent}
	for k, v := range labels {
		if !engineLabel(k) {
			set[k] = v
		}
	}
	if _, err := b.container.SetLabels(ctx, set); err != nil {
		return fmt.Errorf("label %s as sandbox %s's backing: %w", b.id, id, err)
	}
	return nil
}

// stripRestoreDirectives removes from spec the annotations that tell the
// shim how to create its task — restore from an image, be a restore
// target — which a backing's spec carries from its own creation and which
// must not pass to what is made from it.
func stripRestoreDirectives(spec *specs.Spec) {
	delete(spec.Annotations, api.AnnotationRestoreFrom)
	delete(spec.Annotations, api.AnnotationRestoreTarget)
}

func writeSpec(path string, spec *specs.Spec) error {
	if err := api.WriteJSON(path, spec); err != nil {
		return fmt.Errorf("checkpoint spec: %w", err)
	}
	return nil
}

func readSpec(path string) (*specs.Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("checkpoint spec %s: %w", path, err)
	}
	return &s, nil
}

// restore boots a new backing, container id, from handle h: the
// checkpointed spec, its volumes pointed at copies of the checkpoint's of
// its own, restored by the shim. A spare is paused right away; its output
// is held back either way until the gate opens.
func (e *Engine) restore(ctx context.Context, h *Handle, id string, spare bool) (_ *backing, retErr error) {
	spec, err := e.backingSpec(h, id)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", h.ID, err)
	}
	spec.Annotations[api.AnnotationRestoreFrom] = e.store.ImageDir(h.ID)
	if err := e.ownVolumes(ctx, spec, id); err != nil {
		return nil, fmt.Errorf("restore %s: %w", h.ID, err)
	}
	role := "sandbox"
	if spare {
		role = "spare"
	}
	b := &backing{id: id, out: &gate{}, restored: true, volDir: e.store.volumeDir(id)}
	defer func() {
		if retErr != nil {
			_ = e.destroy(ctx, b)
		}
	}()
	if err := e.create(ctx, h, b, spec, map[string]string{labelHandle: h.ID, LabelRole: role, labelLineage: h.Lineage, labelVolumes: b.volDir, LabelOwner: owner}); err != nil {
		return nil, fmt.Errorf("restore %s: %w", h.ID, err)
	}
	if err := b.task.Start(ctx); err != nil {
		return nil, fmt.Errorf("restore %s: %w", h.ID, err)
	}
	if spare {
		if err := e.pause(ctx, b); err != nil {
			return nil, fmt.Errorf("restore %s: %w", h.ID, err)
		}
	}
	return b, nil
}

// ownVolumes points the ext4lite volumes of spec, a new backing's (id),
// at images of its own in the store, which the shim fills from the
// checkpoint's copies (rollbacks and forks never share a volume).
func (e *Engine) ownVolumes(ctx context.Context, spec *specs.Spec, id string) error {
	n := 0
	for i, m := range spec.Mounts {
		if isVol, _, err := oci.VolumeMount(ctx, m); err == nil && isVol {
			spec.Mounts[i].Type = "ext4"
			spec.Mounts[i].Source = filepath.Join(e.store.volumeDir(id), strconv.Itoa(n)+".ext4")
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return os.MkdirAll(e.store.volumeDir(id), 0o755)
}

// backingSpec is handle h's checkpointed spec for a new backing, container
// id: a cgroup of its own (containerd's /<namespace>/<id>); its
// annotations not nil, without the restore directives the checkpointed
// backing was created with (handles saved before save stripped them).
func (e *Engine) backingSpec(h *Handle, id string) (*specs.Spec, error) {
	spec, err := readSpec(filepath.Join(e.store.handleDir(h.ID), specFile))
	if err != nil {
		return nil, err
	}
	stripRestoreDirectives(spec)
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	if l := spec.Linux; l != nil && l.CgroupsPath != "" {
		l.CgroupsPath = path.Join(path.Dir(l.CgroupsPath), id)
	}
	return spec, nil
}

// create makes backing b's container — h's image, snapshotter and
// runtime, spec and labels — and its task, whose output goes to b's
// gate; the task is not started.
func (e *Engine) create(ctx context.Context, h *Handle, b *backing, spec *specs.Spec, labels map[string]string) error {
	image, err := e.c.GetImage(ctx, h.Image)
	if err != nil {
		return fmt.Errorf("its image: %w", err)
	}
	if b.container, err = e.c.NewContainer(ctx, b.id,
		client.WithImage(image),
		client.WithSnapshotter(h.Snapshotter),
		client.WithNewSnapshot(b.id, image),
		client.WithSpec(spec),
		e.withRuntime(h),
		client.WithContainerLabels(labels)); err != nil {
		return err
	}
	io := []cio.Opt{cio.WithStreams(nil, b.out.writer(false), b.out.writer(true))}
	if e.opts.FIFODir != "" {
		io = append(io, cio.WithFIFODir(e.opts.FIFODir))
	}
	b.task, err = b.container.NewTask(ctx, cio.NewCreator(io...))
	return err
}

// withRuntime gives a restored backing the runtime h's sandbox ran with
// (the engine's for handles saved before handles recorded it).
func (e *Engine) withRuntime(h *Handle) client.NewContainerOpts {
	if h.Runtime == nil || h.Runtime.Name == "" {
		return client.WithRuntime(e.opts.Runtime, e.opts.RuntimeOptions)
	}
	return func(_ context.Context, _ *client.Client, c *containers.Container) error {
		c.Runtime = containers.RuntimeInfo{Name: h.Runtime.Name}
		if h.Runtime.OptionsType != "" {
			c.Runtime.Options = &anypb.Any{TypeUrl: h.Runtime.OptionsType, Value: h.Runtime.Options}
		}
		return nil
	}
}

// fillSpares restores, in the background, spares of h until the engine
// keeps Options.Spares of them.
func (e *Engine) fillSpares(ctx context.Context, h *Handle) {
	e.mu.Lock()
	missing := e.opts.Spares - len(e.spares[h.ID]) - e.filling[h.ID]
	if e.releasing[h.ID] {
		missing = 0
	}
	if missing > 0 {
		e.filling[h.ID] += missing
	}
	e.mu.Unlock()
	for i := 0; i < missing; i++ {
		e.background(ctx, "restore a spare of "+h.ID, func(ctx context.Context) error {
			b, err := e.restore(ctx, h, e.newID(h.ID), true)
			e.mu.Lock()
			if e.filling[h.ID]--; e.filling[h.ID] <= 0 {
				delete(e.filling, h.ID)
			}
			keep := err == nil && !e.closed
			if keep {
				e.spares[h.ID] = append(e.spares[h.ID], b)
			}
			e.filled.Broadcast()
			e.mu.Unlock()
			if err != nil {
				return err
			}
			if !keep {
				return e.destroy(ctx, b)
			}
			log.G(ctx).Debugf("gvx rollout: spare %s of %s ready", b.id, h.ID)
			return nil
		})
	}
}

// takeSpare takes a ready spare of handle id (nil if none).
func (e *Engine) takeSpare(id string) *backing {
	e.mu.Lock()
	defer e.mu.Unlock()
	list := e.spares[id]
	if len(list) == 0 {
		return nil
	}
	b := list[0]
	e.spares[id] = list[1:]
	return b
}

// Spares is how many spares of handle id are ready.
func (e *Engine) Spares(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.spares[id])
}
