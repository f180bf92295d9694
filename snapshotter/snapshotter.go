package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/core/snapshots/storage"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/internal/flock"
	"github.com/gvxrun/gvx/volume"
)

// DefaultSize is the filesystem size of a new root snapshot when neither
// its max-size label nor Config.DefaultSize says otherwise. Images are
// sparse: the size is a limit, not an allocation.
const DefaultSize = 10 << 30

// Config configures a Snapshotter.
type Config struct {
	// DefaultSize is the filesystem size in bytes of snapshots without a
	// parent that carry no containerd.io/snapshot/max-size label. Zero
	// means DefaultSize. It is rounded down to the 4 KiB block size and
	// must be at least volume.MinSize.
	DefaultSize int64
	// Hook, if set, is called at the named points (Hook* constants)
	// between the steps of an operation. It exists for crash tests,
	// which kill the process there.
	Hook func(ctx context.Context, point string)
}

// Hook points, in the order an operation passes them.
const (
	// HookPrepareCloned: the clone is staged as snapshots/new-*, the
	// metadata transaction has not started.
	HookPrepareCloned = "prepare-cloned"
	// HookPrepareRenamed: inside the write transaction, the clone has
	// been renamed to snapshots/ID, the transaction is not committed.
	HookPrepareRenamed = "prepare-renamed"
	// HookPrepareCommitted: the metadata is committed, the mounts have
	// not been returned.
	HookPrepareCommitted = "prepare-committed"
	// HookCommitSynced: Commit has checked and fsynced the image, the
	// metadata transaction has not started.
	HookCommitSynced = "commit-synced"
	// HookCommitInTxn: inside Commit's write transaction, not committed.
	HookCommitInTxn = "commit-in-txn"
	// HookRemoveCommitted: Remove has committed the metadata change and
	// not deleted the image.
	HookRemoveCommitted = "remove-committed"
	// HookCleanupRenamed: inside Cleanup's transaction, orphans have been
	// renamed to rm-*, the transaction is not committed.
	HookCleanupRenamed = "cleanup-renamed"
	// HookTemplateStaged: an empty template is made as templates/new-*
	// and not yet renamed into place.
	HookTemplateStaged = "template-staged"
)

// Snapshotter is the ext4lite snapshotter. Its methods are safe for
// concurrent use.
type Snapshotter struct {
	root      string
	snapDir   string
	tmplDir   string
	cfg       Config
	ms        *storage.MetaStore
	templates templates

	mu       sync.Mutex
	lock     *os.File            // flock on ROOT/lock; nil once closed
	inflight map[string]struct{} // staging files being made (base names)
}

var (
	_ snapshots.Snapshotter = (*Snapshotter)(nil)
	_ snapshots.Cleaner     = (*Snapshotter)(nil)
)

// New opens (creating if needed) the snapshotter rooted at root. Only one
// process may use a root at a time; a second gets ErrUnavailable. New
// repairs what an earlier process left when it died: it removes clones
// and templates that were being made and image files no snapshot
// references (see Cleanup).
func New(ctx context.Context, root string, cfg Config) (_ *Snapshotter, retErr error) {
	if cfg.DefaultSize == 0 {
		cfg.DefaultSize = DefaultSize
	}
	size, err := checkSize(cfg.DefaultSize)
	if err != nil {
		return nil, withKind(errdefs.ErrInvalidArgument, fmt.Errorf("ext4lite snapshotter: default size: %w", err))
	}
	cfg.DefaultSize = size
	root, err = filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("ext4lite snapshotter: root: %w", err)
	}
	s := &Snapshotter{
		root:     root,
		snapDir:  filepath.Join(root, "snapshots"),
		tmplDir:  filepath.Join(root, "templates"),
		cfg:      cfg,
		inflight: map[string]struct{}{},
	}
	s.templates.init(s.tmplDir)
	for _, d := range []string{root, s.snapDir, s.tmplDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("ext4lite snapshotter: %w", err)
		}
	}
	if s.lock, err = lockRoot(root); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			flock.Close(s.lock)
		}
	}()
	s.ms, err = storage.NewMetaStore(filepath.Join(root, "metadata.db"))
	if err != nil {
		return nil, fmt.Errorf("ext4lite snapshotter: metadata: %w", err)
	}
	if err := s.recover(ctx); err != nil {
		s.ms.Close()
		return nil, fmt.Errorf("ext4lite snapshotter: recover %s: %w", root, err)
	}
	return s, nil
}

// lockRoot takes an exclusive, non-blocking flock on ROOT/lock.
func lockRoot(root string) (*os.File, error) {
	p := filepath.Join(root, "lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("ext4lite snapshotter: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, withKind(errdefs.ErrUnavailable, fmt.Errorf(
				"ext4lite snapshotter: root %s is in use by another process (%s is locked); stop it or use another --root", root, p))
		}
		return nil, fmt.Errorf("ext4lite snapshotter: lock %s: %w", p, err)
	}
	return f, nil
}

// recover runs at start, when no operation can be in flight: it removes
// abandoned staging files and orphaned images, and logs snapshots whose
// image is gone (which no crash can cause, only outside interference).
func (s *Snapshotter) recover(ctx context.Context) error {
	if err := s.templates.cleanStaging(ctx); err != nil {
		return err
	}
	if err := s.Cleanup(ctx); err != nil {
		return err
	}
	return s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		ids, err := idMap(ctx)
		if err != nil {
			return err
		}
		for id, key := range ids {
			if _, err := os.Lstat(s.image(id)); err != nil {
				log.G(ctx).WithError(err).WithField("key", key).
					Error("ext4lite: snapshot has no image file; remove it (Mounts and Prepare on it will fail)")
			}
		}
		return nil
	})
}

// Close closes the metadata store and releases the root. It is safe to
// call more than once.
func (s *Snapshotter) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lock == nil {
		return nil
	}
	err := s.ms.Close()
	flock.Close(s.lock)
	s.lock = nil
	return err
}

// Root is the directory the snapshotter keeps its files in.
func (s *Snapshotter) Root() string { return s.root }

// image is the path of snapshot id's image file.
func (s *Snapshotter) image(id string) string { return filepath.Join(s.snapDir, id) }

// hook calls Config.Hook at point.
func (s *Snapshotter) hook(ctx context.Context, point string) {
	if s.cfg.Hook != nil {
		s.cfg.Hook(ctx, point)
	}
}

// Stat returns the info of the snapshot key.
func (s *Snapshotter) Stat(ctx context.Context, key string) (info snapshots.Info, err error) {
	err = s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		_, info, _, err = storage.GetInfo(ctx, key)
		return err
	})
	if err != nil {
		return snapshots.Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	return info, nil
}

// Update changes the labels of a snapshot (the only mutable fields).
func (s *Snapshotter) Update(ctx context.Context, info snapshots.Info, fieldpaths ...string) (_ snapshots.Info, err error) {
	err = s.ms.WithTransaction(ctx, true, func(ctx context.Context) error {
		info, err = storage.UpdateInfo(ctx, info, fieldpaths...)
		return err
	})
	if err != nil {
		return snapshots.Info{}, fmt.Errorf("update %s: %w", info.Name, err)
	}
	return info, nil
}

// Walk calls fn for every snapshot matching the filters.
func (s *Snapshotter) Walk(ctx context.Context, fn snapshots.WalkFunc, filters ...string) error {
	return s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		return storage.WalkInfo(ctx, fn, filters...)
	})
}

// checkSize validates a filesystem size for an image, rounded down to
// the block size.
func checkSize(n int64) (int64, error) {
	if n < volume.MinSize {
		return 0, fmt.Errorf("%d bytes is below the minimum %s", n, volume.FormatSize(volume.MinSize))
	}
	return n - n%volume.BlockSize, nil
}
