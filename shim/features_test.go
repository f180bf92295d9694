package shim

import (
	"context"
	"slices"
	"testing"

	"github.com/containerd/typeurl/v2"
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

// TestInfoFeatures: the shim's -info carries an OCI features document that
// containerd decodes (as its CRI does) to one listing "rro" and no shared
// propagation.
func TestInfoFeatures(t *testing.T) {
	info, err := manager{}.Info(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.Features == nil {
		t.Fatal("no features in the runtime info")
	}
	v, err := typeurl.UnmarshalAny(info.Features)
	if err != nil {
		t.Fatalf("decode features (%s): %v", info.Features.GetTypeUrl(), err)
	}
	f, ok := v.(*features.Features)
	if !ok {
		t.Fatalf("features are a %T", v)
	}
	if !slices.Contains(f.MountOptions, "rro") || !slices.Contains(f.MountOptions, "rslave") {
		t.Errorf("mount options %q lack rro or rslave", f.MountOptions)
	}
	for _, o := range []string{"shared", "rshared"} {
		if slices.Contains(f.MountOptions, o) {
			t.Errorf("mount options list %q, which gvx refuses", o)
		}
	}
	if f.Linux != nil {
		t.Errorf("features claim Linux extensions (user namespaces, idmap) gvx does not offer CRI: %+v", f.Linux)
	}
}
