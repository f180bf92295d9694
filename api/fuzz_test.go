package api_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gvxrun/gvx/api"
)

// FuzzDecodeVolumes: whatever the annotation holds, DecodeVolumes returns
// only absolute image and staging paths, and what it returns encodes and
// decodes to itself.
func FuzzDecodeVolumes(f *testing.F) {
	f.Add(`[{"image":"/v/a.ext4","staging":"/run/gvx/volumes/default/t/0"}]`)
	f.Add(`[{"image":"/v/a.ext4","staging":"/s/0","readonly":true},{"image":"/v/b","staging":"/s/1"}]`)
	f.Add(`[{"image":"a.ext4","staging":"/s"}]`)
	f.Add(`null`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, v string) {
		vols, err := api.DecodeVolumes(v)
		if err != nil {
			return
		}
		for _, vol := range vols {
			if !filepath.IsAbs(vol.Image) || !filepath.IsAbs(vol.Staging) {
				t.Fatalf("DecodeVolumes(%q) accepted a relative path: %+v", v, vol)
			}
		}
		enc, err := api.EncodeVolumes(vols)
		if err != nil {
			t.Fatalf("EncodeVolumes(%+v): %v", vols, err)
		}
		again, err := api.DecodeVolumes(enc)
		if err != nil {
			t.Fatalf("DecodeVolumes(EncodeVolumes(%+v)) = %v", vols, err)
		}
		if len(vols) > 0 && !reflect.DeepEqual(again, vols) {
			t.Fatalf("round trip changed %+v into %+v", vols, again)
		}
	})
}
