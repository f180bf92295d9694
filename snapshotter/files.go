package snapshotter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/containerd/containerd/v2/core/snapshots/storage"
	"github.com/containerd/errdefs"
)

// Prefixes of the non-snapshot files in ROOT/snapshots.
const (
	stagingPrefix  = "new-"
	removingPrefix = "rm-"
)

// randomName returns 16 random hex digits.
func randomName() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on Linux
	}
	return hex.EncodeToString(b)
}

// isID reports whether a file name in ROOT/snapshots is a snapshot ID.
func isID(name string) bool {
	n, err := strconv.ParseUint(name, 10, 64)
	return err == nil && strconv.FormatUint(n, 10) == name
}

// syncDir fsyncs a directory, making renames and removals in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// staging registers a new staging path in ROOT/snapshots as in flight,
// so Cleanup leaves it alone, and returns it. done must be called once
// the file has been renamed or removed.
func (s *Snapshotter) staging() (path string, done func()) {
	name := stagingPrefix + randomName()
	s.mu.Lock()
	s.inflight[name] = struct{}{}
	s.mu.Unlock()
	return filepath.Join(s.snapDir, name), func() {
		s.mu.Lock()
		delete(s.inflight, name)
		s.mu.Unlock()
	}
}

// inFlight reports whether the staging file name is being made.
func (s *Snapshotter) inFlight(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.inflight[name]
	return ok
}

// idMap maps every snapshot ID to its key; an empty store (whose bucket
// storage creates only with the first snapshot) gives an empty map. ctx
// must hold a metadata transaction.
func idMap(ctx context.Context) (map[string]string, error) {
	ids, err := storage.IDMap(ctx)
	if errdefs.IsNotFound(err) {
		return map[string]string{}, nil
	}
	return ids, err
}
