package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/containerd/v2/core/snapshots/storage"
	"github.com/containerd/log"
)

// Remove deletes the snapshot key (which must have no children) and its
// image. The metadata goes first: if the process dies before the file is
// deleted, Cleanup (or the next start) reclaims it. A snapshot whose
// image is already gone can still be removed.
func (s *Snapshotter) Remove(ctx context.Context, key string) error {
	var id string
	err := s.ms.WithTransaction(ctx, true, func(ctx context.Context) error {
		var err error
		id, _, err = storage.Remove(ctx, key)
		return err
	})
	if err != nil {
		return fmt.Errorf("remove %s: %w", key, err)
	}
	s.hook(ctx, HookRemoveCommitted)
	if err := os.Remove(s.image(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.G(ctx).WithError(err).WithField("key", key).Warn("ext4lite: image not deleted; Cleanup will retry")
	}
	return nil
}

// Cleanup reclaims image files that no snapshot references: images left
// by a process killed between removing a snapshot's metadata and its
// file, or between renaming a clone into place and committing its
// metadata, and clones or deletions it abandoned. Orphans are found and
// renamed to rm-* inside a write transaction, so a concurrent Prepare
// (which renames its clone inside its own) cannot be mistaken for one;
// the (possibly slow) deletions happen after it.
func (s *Snapshotter) Cleanup(ctx context.Context) error {
	var doomed []string
	err := s.ms.WithTransaction(ctx, true, func(ctx context.Context) error {
		ids, err := idMap(ctx)
		if err != nil {
			return err
		}
		entries, err := os.ReadDir(s.snapDir)
		if err != nil {
			return err
		}
		renamed := false
		for _, e := range entries {
			name := e.Name()
			switch {
			case isID(name):
				if _, ok := ids[name]; ok {
					continue
				}
				rm := removingPrefix + name + "-" + randomName()
				if err := os.Rename(filepath.Join(s.snapDir, name), filepath.Join(s.snapDir, rm)); err != nil {
					return err
				}
				renamed = true
				doomed = append(doomed, rm)
			case strings.HasPrefix(name, removingPrefix):
				doomed = append(doomed, name)
			case strings.HasPrefix(name, stagingPrefix) && !s.inFlight(name):
				doomed = append(doomed, name)
			}
		}
		if renamed {
			if err := syncDir(s.snapDir); err != nil {
				return err
			}
		}
		s.hook(ctx, HookCleanupRenamed)
		return nil
	})
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	var errs []error
	for _, name := range doomed {
		if err := os.Remove(filepath.Join(s.snapDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		log.G(ctx).WithField("file", name).Info("ext4lite: reclaimed unreferenced image")
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	return nil
}
