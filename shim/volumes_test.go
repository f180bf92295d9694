package shim

import (
	"context"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
)

// TestUserVolumesAnnotationRefused: a spec that arrives with gvx's own
// volumes annotation (which gvx-sentry would mount unchecked) is refused,
// whether or not it has ext4 mounts, and nothing is leased or staged.
func TestUserVolumesAnnotationRefused(t *testing.T) {
	for _, mounts := range [][]specs.Mount{nil, {{Destination: "/data", Type: "ext4", Source: "/nonexistent.ext4"}}} {
		s := &specs.Spec{Mounts: mounts, Annotations: map[string]string{
			api.AnnotationVolumes: `[{"image":"/dev/vda","staging":"/run/x"}]`,
		}}
		staged := false
		vols, mounted, err := prepareVolumes(context.Background(), s, t.TempDir(), func(string) error { staged = true; return nil }, nil, nil, nil)
		if err == nil || !strings.Contains(err.Error(), api.AnnotationVolumes) || !strings.Contains(err.Error(), "type ext4") {
			t.Fatalf("prepareVolumes with a user-set %s: %v", api.AnnotationVolumes, err)
		}
		if vols != nil || mounted != nil || staged {
			t.Fatalf("refused spec left leases %v, mounts %v, staged %v", vols, mounted, staged)
		}
	}
}
