package snapshotter

import (
	"errors"
	"testing"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"

	"github.com/gvxrun/gvx/volume"
)

// FuzzMaxSize: the max-size label is either refused as an invalid
// argument or gives a size of at least volume.MinSize on a 4 KiB boundary.
func FuzzMaxSize(f *testing.F) {
	for _, s := range []string{"1073741824", "0", "-1", "4096", "9223372036854775807", "1e9", " 12", "0x1000", "16777217"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, ok, err := maxSize(map[string]string{snapshots.LabelSnapshotMaxSize: v, "other": v})
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) || ok {
				t.Fatalf("maxSize(%q): %v (ok %v), want an invalid-argument error", v, err, ok)
			}
			return
		}
		if !ok || n < volume.MinSize || n%4096 != 0 {
			t.Fatalf("maxSize(%q) = %d, %v: want ≥ %d, a multiple of 4096", v, n, ok, volume.MinSize)
		}
	})
}
