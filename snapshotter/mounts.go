package snapshotter

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/core/snapshots/storage"

	"github.com/gvxrun/gvx/volume"
)

// Mounts returns the mount of an active snapshot or view (committed
// snapshots have none: FailedPrecondition). It checks that
// the image is still there and is ext4, so a lost or damaged image gives
// a clear DataLoss error here rather than a mount failure later.
func (s *Snapshotter) Mounts(ctx context.Context, key string) ([]mount.Mount, error) {
	var sn storage.Snapshot
	err := s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		var err error
		sn, err = storage.GetSnapshot(ctx, key)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("mounts %s: %w", key, err)
	}
	p := s.image(sn.ID)
	if _, err := volume.Inspect(ctx, p); err != nil {
		return nil, fmt.Errorf("mounts %s: %w", key, imageError(key, p, err))
	}
	return s.mounts(sn.Kind, sn.ID), nil
}

// mounts is the loop mount of snapshot id's image: read-write for an
// active snapshot, read-only for a view.
func (s *Snapshotter) mounts(kind snapshots.Kind, id string) []mount.Mount {
	mode := "rw"
	if kind == snapshots.KindView {
		mode = "ro"
	}
	return []mount.Mount{{
		Type:    "ext4",
		Source:  s.image(id),
		Options: []string{"loop", mode},
	}}
}
