package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/core/snapshots/storage"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/gvxrun/gvx/internal/loopdev"
	"github.com/gvxrun/gvx/volume"
)

// Commit turns the active snapshot key into the committed snapshot name.
// The image must not be mounted read-write: it becomes the parent of
// future clones, which must be clean filesystems. Commit fsyncs it and
// records its usage before committing the metadata; the file itself
// stays where it is (the ID does not change). ext4lite cannot rebase: a
// parent given at commit must be the one the snapshot was prepared on.
func (s *Snapshotter) Commit(ctx context.Context, name, key string, opts ...snapshots.Opt) error {
	if err := s.commit(ctx, name, key, opts); err != nil {
		return fmt.Errorf("commit %s as %s: %w", key, name, err)
	}
	return nil
}

func (s *Snapshotter) commit(ctx context.Context, name, key string, opts []snapshots.Opt) error {
	var base snapshots.Info
	for _, o := range opts {
		if err := o(&base); err != nil {
			return err
		}
	}
	id, info, err := s.getInfo(ctx, key)
	if err != nil {
		return err
	}
	if info.Kind != snapshots.KindActive {
		return fmt.Errorf("snapshot %s is %s, only active snapshots can be committed: %w", key, info.Kind, errdefs.ErrFailedPrecondition)
	}
	if base.Parent != "" && base.Parent != info.Parent {
		return fmt.Errorf("cannot rebase onto %s: ext4lite images contain their parent (do not enable the %q capability): %w",
			base.Parent, snapshots.RebaseCap, errdefs.ErrNotImplemented)
	}
	p := s.image(id)
	if err := settle(ctx, key, p); err != nil {
		return err
	}
	usage, err := imageUsage(p)
	if err != nil {
		return imageError(key, p, err)
	}
	s.hook(ctx, HookCommitSynced)
	return s.ms.WithTransaction(ctx, true, func(ctx context.Context) error {
		now, _, _, err := storage.GetInfo(ctx, key)
		if err != nil {
			return err
		}
		if now != id {
			return withKind(errdefs.ErrAborted, fmt.Errorf("snapshot %s was replaced during commit; retry", key))
		}
		if _, err := storage.CommitActive(ctx, key, name, usage, opts...); err != nil {
			return err
		}
		s.hook(ctx, HookCommitInTxn)
		return nil
	})
}

// getInfo reads a snapshot's ID and info.
func (s *Snapshotter) getInfo(ctx context.Context, key string) (id string, info snapshots.Info, err error) {
	err = s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		id, info, _, err = storage.GetInfo(ctx, key)
		return err
	})
	return id, info, err
}

// settle makes the image at p fit to be a parent: a clean ext4
// filesystem, durable on disk. An image that is not clean is refused if a
// loop device still has it (mounted: unmount it first); otherwise it was
// left dirty (a crash while mounted) and its journal is replayed with
// e2fsck -fp.
func settle(ctx context.Context, key, p string) error {
	info, err := volume.Inspect(ctx, p)
	if err != nil {
		return imageError(key, p, err)
	}
	if !info.Clean {
		if dev, err := loopdev.Device(p); err != nil {
			return err
		} else if dev != "" {
			return fmt.Errorf("image %s is still mounted (%s, on %s): unmount it before committing: %w",
				p, info.State, dev, errdefs.ErrFailedPrecondition)
		}
		log.G(ctx).WithField("key", key).WithField("state", info.State).Warn("ext4lite: image not clean at commit, running e2fsck -fp")
		if err := fsckPreen(ctx, p); err != nil {
			return imageError(key, p, err)
		}
		if info, err = volume.Inspect(ctx, p); err != nil {
			return imageError(key, p, err)
		}
		if !info.Clean {
			return imageError(key, p, fmt.Errorf("still not clean after e2fsck -fp: %s: %w", info.State, volume.ErrNotClean))
		}
	}
	f, err := os.Open(p)
	if err != nil {
		return imageError(key, p, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return classify(fmt.Errorf("fsync %s: %w", p, err))
	}
	// The shim verifies a container's root filesystem before the host
	// kernel mounts it; checked (and marked) here, once per layer, the
	// clones of this image carry the mark and skip the full check. Verify
	// refuses an image a loop device still holds: the auto-clearing one of
	// a mount just undone detaches asynchronously (a loaded node can take
	// a while), so that is waited for first.
	if err := loopdev.WaitDetached(ctx, p); err != nil {
		return fmt.Errorf("commit %s: %w: unmount it before committing: %w", key, err, errdefs.ErrFailedPrecondition)
	}
	if err := volume.Verify(ctx, p); err != nil {
		return imageError(key, p, err)
	}
	return nil
}

// fsckPreen runs e2fsck -fp on an unmounted image; exit codes 0-3 mean
// clean or fixed.
func fsckPreen(ctx context.Context, p string) error {
	bin, err := volume.Tool("e2fsck")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, "-fp", p)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode()&^3 == 0 {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("e2fsck -fp: %v: %s: %w", err, strings.TrimSpace(string(out)), volume.ErrFsck)
	}
	return nil
}
