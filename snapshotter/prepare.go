package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/core/snapshots/storage"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/gvxrun/gvx/volume"
)

// Prepare creates the active snapshot key on top of the committed
// snapshot parent (or an empty filesystem) and returns its mount: a
// reflink clone of the parent's image, mounted read-write.
func (s *Snapshotter) Prepare(ctx context.Context, key, parent string, opts ...snapshots.Opt) ([]mount.Mount, error) {
	m, err := s.create(ctx, snapshots.KindActive, key, parent, opts)
	if err != nil {
		return nil, fmt.Errorf("prepare %s: %w", key, err)
	}
	return m, nil
}

// View creates the read-only snapshot key of the committed snapshot
// parent (or of an empty filesystem) and returns its mount. It is a
// clone too, so it never pins its parent's file.
func (s *Snapshotter) View(ctx context.Context, key, parent string, opts ...snapshots.Opt) ([]mount.Mount, error) {
	m, err := s.create(ctx, snapshots.KindView, key, parent, opts)
	if err != nil {
		return nil, fmt.Errorf("view %s: %w", key, err)
	}
	return m, nil
}

// create clones the parent (or the template) to a staging file outside
// any transaction, then creates the metadata and renames the clone into
// place in one write transaction.
func (s *Snapshotter) create(ctx context.Context, kind snapshots.Kind, key, parent string, opts []snapshots.Opt) ([]mount.Mount, error) {
	start := time.Now()
	var base snapshots.Info
	for _, o := range opts {
		if err := o(&base); err != nil {
			return nil, err
		}
	}
	size, sized, err := maxSize(base.Labels)
	if err != nil {
		return nil, err
	}
	pid, err := s.resolve(ctx, key, parent)
	if err != nil {
		return nil, err
	}

	staged, done := s.staging()
	defer done()
	defer os.Remove(staged) // a no-op once renamed
	if parent == "" {
		if !sized {
			size = s.cfg.DefaultSize
		}
		if err := s.cloneTemplate(ctx, size, staged); err != nil {
			return nil, err
		}
	} else if err := s.cloneParent(ctx, parent, pid, staged, size, sized); err != nil {
		return nil, err
	}
	s.hook(ctx, HookPrepareCloned)

	var id string
	err = s.ms.WithTransaction(ctx, true, func(ctx context.Context) error {
		sn, err := storage.CreateSnapshot(ctx, kind, key, parent, opts...)
		if err != nil {
			return err
		}
		if parent != "" && (len(sn.ParentIDs) == 0 || sn.ParentIDs[0] != pid) {
			return withKind(errdefs.ErrAborted, fmt.Errorf("parent %s was replaced while it was being cloned; retry", parent))
		}
		if err := os.Rename(staged, s.image(sn.ID)); err != nil {
			return fmt.Errorf("move clone into place: %w", err)
		}
		id = sn.ID
		if err := syncDir(s.snapDir); err != nil {
			return err
		}
		s.hook(ctx, HookPrepareRenamed)
		return nil
	})
	if err != nil {
		if id != "" {
			os.Remove(s.image(id)) // the transaction did not commit
		}
		return nil, err
	}
	s.hook(ctx, HookPrepareCommitted)
	log.G(ctx).WithField("key", key).WithField("parent", parent).WithField("id", id).
		WithField("duration", time.Since(start)).Debug("ext4lite: snapshot created")
	return s.mounts(kind, id), nil
}

// resolve checks, before any cloning, that key is free and that parent
// (if any) is committed, and returns the parent's ID.
func (s *Snapshotter) resolve(ctx context.Context, key, parent string) (pid string, err error) {
	err = s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		if _, _, _, err := storage.GetInfo(ctx, key); err == nil {
			return fmt.Errorf("snapshot %s: %w", key, errdefs.ErrAlreadyExists)
		} else if !errdefs.IsNotFound(err) {
			return err
		}
		if parent == "" {
			return nil
		}
		id, info, _, err := storage.GetInfo(ctx, parent)
		if err != nil {
			return fmt.Errorf("parent: %w", err)
		}
		if info.Kind != snapshots.KindCommitted {
			return fmt.Errorf("parent %s is %s, not committed: commit it first: %w", parent, info.Kind, errdefs.ErrInvalidArgument)
		}
		pid = id
		return nil
	})
	return pid, err
}

// cloneTemplate clones the empty template of size bytes to dst.
func (s *Snapshotter) cloneTemplate(ctx context.Context, size int64, dst string) error {
	tmpl, err := s.templates.get(ctx, size, func(p string) { s.hook(ctx, p) })
	if err != nil {
		return classify(err)
	}
	if _, err := volume.Clone(ctx, tmpl, dst, volume.CloneOptions{}); err != nil {
		s.templates.forget(size) // verify (or remake) it next time
		return classify(fmt.Errorf("clone empty template: %w", err))
	}
	return nil
}

// cloneParent clones the image of parent (ID pid) to dst and, when a
// max-size label asks for more room than the parent has, grows it.
func (s *Snapshotter) cloneParent(ctx context.Context, parent, pid, dst string, size int64, sized bool) error {
	src := s.image(pid)
	if _, err := volume.Clone(ctx, src, dst, volume.CloneOptions{}); err != nil {
		if errors.Is(err, os.ErrNotExist) && !s.exists(ctx, parent) {
			return fmt.Errorf("parent %s was removed meanwhile: %w", parent, errdefs.ErrNotFound)
		}
		return imageError(parent, src, err)
	}
	if !sized {
		return nil
	}
	info, err := volume.Inspect(ctx, dst)
	if err != nil {
		return classify(err)
	}
	switch {
	case size < info.Size:
		return withKind(errdefs.ErrInvalidArgument, fmt.Errorf(
			"label %s=%d is smaller than parent %s's filesystem (%d bytes); an image cannot shrink below its parent",
			snapshots.LabelSnapshotMaxSize, size, parent, info.Size))
	case size > info.Size:
		if _, err := volume.Resize(ctx, dst, size); err != nil {
			return classify(fmt.Errorf("grow clone to %s=%d: %w", snapshots.LabelSnapshotMaxSize, size, err))
		}
	}
	return nil
}

// exists reports whether the snapshot key is in the metadata.
func (s *Snapshotter) exists(ctx context.Context, key string) bool {
	err := s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		_, _, _, err := storage.GetInfo(ctx, key)
		return err
	})
	return err == nil
}

// maxSize reads the containerd.io/snapshot/max-size label: a decimal
// byte count, rounded down to the 4 KiB block size.
func maxSize(labels map[string]string) (int64, bool, error) {
	v, ok := labels[snapshots.LabelSnapshotMaxSize]
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err == nil {
		n, err = checkSize(n)
	}
	if err != nil {
		return 0, false, withKind(errdefs.ErrInvalidArgument, fmt.Errorf("label %s=%q: want a byte count of at least %d: %v",
			snapshots.LabelSnapshotMaxSize, v, volume.MinSize, err))
	}
	return n, true, nil
}
