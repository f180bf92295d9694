package snapshotter

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
)

// TestMountsShape: an active snapshot is an ext4 loop mount read-write, a
// view read-only, both of the snapshot's own image.
func TestMountsShape(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	committed(t, s, "base", "", nil)
	for kind, want := range map[snapshots.Kind]string{snapshots.KindActive: "rw", snapshots.KindView: "ro"} {
		key := "k-" + kind.String()
		var m []mount.Mount
		var err error
		if kind == snapshots.KindView {
			m, err = s.View(ctx, key, "base")
		} else {
			m, err = s.Prepare(ctx, key, "base")
		}
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.Mounts(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		exp := []mount.Mount{{Type: "ext4", Source: s.image(idOf(t, s, key)), Options: []string{"loop", want}}}
		if !reflect.DeepEqual(m, exp) || !reflect.DeepEqual(again, exp) {
			t.Errorf("%s: mounts %+v and %+v, want %+v", kind, m, again, exp)
		}
	}
}

// TestUsage: usage is what a snapshot allocates beyond what it shares.
// On XFS a child starts at almost nothing and grows by what is written
// into it; on ext4 (no reflink) every clone owns a full sparse copy.
func TestUsage(t *testing.T) {
	for _, fstype := range []string{"xfs", "ext4"} {
		t.Run(fstype, func(t *testing.T) {
			ctx := context.Background()
			s := open(t, filepath.Join(newLoopFS(t, fstype, "2G"), "root"))
			usage := func(key string) int64 {
				t.Helper()
				u, err := s.Usage(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if u.Inodes != 1 {
					t.Errorf("usage of %s: %d inodes, want 1", key, u.Inodes)
				}
				return u.Size
			}
			write := func(key string, n int) {
				t.Helper()
				m, err := s.Mounts(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				dir, unmount := mountAt(t, m)
				if err := os.WriteFile(filepath.Join(dir, key), randomBytes(t, n), 0o644); err != nil {
					t.Fatal(err)
				}
				unmount()
			}
			const mib = 1 << 20
			if _, err := s.Prepare(ctx, "a", ""); err != nil {
				t.Fatal(err)
			}
			write("a", 8*mib)
			ua := usage("a")
			if ua < 8*mib || ua > 16*mib {
				t.Errorf("after writing 8 MiB into a: usage %d", ua)
			}
			if err := s.Commit(ctx, "A", "a"); err != nil {
				t.Fatal(err)
			}
			if got := usage("A"); got < 8*mib || got > ua {
				t.Errorf("committed A: usage %d, want the value measured at commit (≈%d)", got, ua)
			}
			if _, err := s.Prepare(ctx, "b", "A"); err != nil {
				t.Fatal(err)
			}
			ub := usage("b")
			if fstype == "xfs" && ub > mib {
				t.Errorf("fresh reflink clone b: usage %d, want < 1 MiB", ub)
			}
			if fstype == "ext4" && ub < 8*mib {
				t.Errorf("fresh sparse copy b: usage %d, want ≥ 8 MiB (a full copy)", ub)
			}
			write("b", 4*mib)
			if got := usage("b"); got < ub+4*mib || got > ub+8*mib {
				t.Errorf("after writing 4 MiB into b: usage %d, was %d", got, ub)
			}
			t.Logf("%s: a %d, b fresh %d, b after 4 MiB %d", fstype, ua, ub, usage("b"))
		})
	}
}
