package shim

import (
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/checkpoint"
)

// TestSameDestinations: a checkpoint fits a restore target's staged
// volumes only one for one, at the same destinations, each a copy (a
// read-only volume is not copied); the refusal names both sides.
func TestSameDestinations(t *testing.T) {
	staged := []api.Volume{{Image: "/s/0.ext4", Destination: "/work"}, {Image: "/s/1.ext4", Destination: "/data"}}
	copied := func(dst string) checkpoint.Volume {
		return checkpoint.Volume{Destination: dst, File: "gvx-volumes/" + strings.Trim(dst, "/") + ".ext4"}
	}
	for _, tc := range []struct {
		name  string
		saved []checkpoint.Volume
		want  bool
	}{
		{"the same, in another order", []checkpoint.Volume{copied("/data"), copied("/work")}, true},
		{"none", nil, false},
		{"one missing", []checkpoint.Volume{copied("/work")}, false},
		{"another destination", []checkpoint.Volume{copied("/work"), copied("/other")}, false},
		{"one read-only", []checkpoint.Volume{copied("/work"), {Destination: "/data", ReadOnly: true}}, false},
		{"one more", []checkpoint.Volume{copied("/work"), copied("/data"), copied("/x")}, false},
	} {
		if got := sameDestinations(tc.saved, staged); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if !sameDestinations(nil, nil) {
		t.Error("no volumes on either side must fit")
	}
	if got := volumePaths([]checkpoint.Volume{copied("/work"), {Destination: "/ro", ReadOnly: true}}); got != "/work, /ro (read-only)" {
		t.Errorf("volumePaths: %q", got)
	}
	if got := targetPaths(nil); got != "none" {
		t.Errorf("targetPaths of none: %q", got)
	}
}
