package volmount

import (
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/sentry/internal/contractroot"
)

// TestContract: the volumes annotation the shim writes, as contract.json
// spells it, is what FromSpec decodes.
func TestContract(t *testing.T) {
	c := contractroot.Load(t)
	s := &specs.Spec{Annotations: map[string]string{c.Name("annotation_volumes"): c.Volumes.Annotation}}
	vols, err := FromSpec(s)
	if err != nil || !reflect.DeepEqual(vols, c.Volumes.Decoded) {
		t.Errorf("FromSpec = %+v, %v; contract.json says %+v", vols, err, c.Volumes.Decoded)
	}
}
