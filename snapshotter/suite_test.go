package snapshotter

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/core/snapshots/testsuite"
)

// TestSuite runs containerd's generic snapshotter suite on an XFS test
// filesystem (clones are reflinks) and on an ext4 one (sparse copies).
// The suite makes each test's root with os.MkdirTemp(""), so TMPDIR
// points into the test filesystem while it runs.
func TestSuite(t *testing.T) {
	for _, fstype := range []string{"xfs", "ext4"} {
		t.Run(fstype, func(t *testing.T) {
			mnt := newLoopFS(t, fstype, "8G")
			tmp := filepath.Join(mnt, "tmp")
			if err := os.Mkdir(tmp, 0o755); err != nil {
				t.Fatal(err)
			}
			old, had := os.LookupEnv("TMPDIR")
			os.Setenv("TMPDIR", tmp)
			defer func() {
				if had {
					os.Setenv("TMPDIR", old)
				} else {
					os.Unsetenv("TMPDIR")
				}
			}()
			// t.Run returns once all the suite's parallel tests are done.
			t.Run("suite", func(t *testing.T) {
				testsuite.SnapshotterSuite(t, "ext4lite", func(ctx context.Context, root string) (snapshots.Snapshotter, func() error, error) {
					s, err := New(ctx, root, Config{DefaultSize: testSize})
					if err != nil {
						return nil, nil, err
					}
					return s, s.Close, nil
				})
			})
		})
	}
}
