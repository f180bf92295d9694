package snapshotter

import (
	"context"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"

	"github.com/gvxrun/gvx/internal/testfs"
	"github.com/gvxrun/gvx/volume"
)

// testSize is the default image size in tests: small, so sparse copies on
// ext4 are fast.
const testSize = 64 << 20

var (
	requireRoot  = testfs.RequireRoot
	requireTools = testfs.RequireTools
	sh           = testfs.Sh
	loopsUnder   = testfs.LoopsUnder
)

// newLoopFS makes and mounts a filesystem of type fstype and size; see
// testfs.LoopFS.
func newLoopFS(t *testing.T, fstype, size string) string {
	t.Helper()
	requireTools(t, "mkfs.ext4", "debugfs", "e2fsck")
	return testfs.LoopFS(t, fstype, size)
}

// open opens a snapshotter on root with test defaults; cleanup closes it.
func open(t *testing.T, root string) *Snapshotter {
	t.Helper()
	requireTools(t, "mkfs.ext4", "debugfs", "e2fsck")
	s, err := New(context.Background(), root, Config{DefaultSize: testSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// mountAt mounts m on a new directory and returns it; the returned
// function (also run at cleanup) unmounts it.
func mountAt(t *testing.T, m []mount.Mount) (string, func()) {
	t.Helper()
	dir := t.TempDir()
	if err := mount.All(m, dir); err != nil {
		t.Fatalf("mount %v: %v", m, err)
	}
	done := false
	unmount := func() {
		if done {
			return
		}
		done = true
		if err := mount.UnmountAll(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	}
	t.Cleanup(unmount)
	return dir, unmount
}

// committed prepares key from parent, lets fill write into it if given
// (mounted; needs root), and commits it as name.
func committed(t *testing.T, s *Snapshotter, name, parent string, fill func(dir string)) {
	t.Helper()
	ctx := context.Background()
	key := name + "-active"
	m, err := s.Prepare(ctx, key, parent)
	if err != nil {
		t.Fatal(err)
	}
	if fill != nil {
		dir, unmount := mountAt(t, m)
		fill(dir)
		unmount()
	}
	if err := s.Commit(ctx, name, key); err != nil {
		t.Fatal(err)
	}
}

// idOf returns the ID of snapshot key.
func idOf(t *testing.T, s *Snapshotter, key string) string {
	t.Helper()
	id, _, err := s.getInfo(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// keys lists all snapshots as "key=kind", sorted.
func keys(t *testing.T, s *Snapshotter) []string {
	t.Helper()
	var out []string
	err := s.Walk(context.Background(), func(_ context.Context, i snapshots.Info) error {
		out = append(out, i.Name+"="+i.Kind.String())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// files lists ROOT/snapshots, sorted.
func files(t *testing.T, s *Snapshotter) []string {
	t.Helper()
	entries, err := os.ReadDir(s.snapDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// checkConsistent asserts the invariant every crash must preserve: the
// image files are exactly the snapshots in the metadata (no orphans, no
// staging or deletion leftovers, no snapshot without its image), every
// image is ext4 and every committed one clean, and the templates
// directory holds only finished templates.
func checkConsistent(t *testing.T, s *Snapshotter) {
	t.Helper()
	ctx := context.Background()
	var ids map[string]string
	err := s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		var err error
		ids, err = idMap(ctx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for id := range ids {
		want = append(want, id)
	}
	sort.Strings(want)
	if got := files(t, s); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("image files %v, want exactly the snapshot IDs %v (metadata: %v)", got, want, ids)
	}
	for id, key := range ids {
		info, err := volume.Inspect(ctx, s.image(id))
		if err != nil {
			t.Errorf("snapshot %s: %v", key, err)
			continue
		}
		if st, err := s.Stat(ctx, key); err == nil && st.Kind == snapshots.KindCommitted && !info.Clean {
			t.Errorf("committed snapshot %s is not clean: %s", key, info.State)
		}
	}
	tmpl, err := os.ReadDir(s.tmplDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tmpl {
		if !strings.HasPrefix(e.Name(), "empty-") {
			t.Errorf("left in templates: %s", e.Name())
		}
	}
}
