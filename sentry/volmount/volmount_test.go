package volmount

import (
	"os"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
)

func TestCreateBundle(t *testing.T) {
	for _, tc := range []struct {
		argv   []string
		bundle string
		ok     bool
	}{
		{[]string{"gvx-sentry", "--root", "/r", "--log", "/l", "create", "--bundle", "/b", "--pid-file", "/p", "id"}, "/b", true},
		{[]string{"gvx-sentry", "--root=/r", "run", "--bundle=/b2", "id"}, "/b2", true},
		{[]string{"gvx-sentry", "create", "-b", "/b3", "id"}, "/b3", true},
		{[]string{"gvx-sentry", "--root", "/r", "start", "id"}, "", false},
		{[]string{"gvx-sentry", "--root", "/r", "delete", "--force", "id"}, "", false},
	} {
		b, ok := CreateBundle(tc.argv)
		if ok != tc.ok || (tc.ok && b != tc.bundle) {
			t.Errorf("CreateBundle(%q) = %q, %v; want %q, %v", tc.argv, b, ok, tc.bundle, tc.ok)
		}
	}
}

func TestFromSpec(t *testing.T) {
	s := &specs.Spec{}
	if v, err := FromSpec(s); err != nil || v != nil {
		t.Errorf("no annotation: %v %v", v, err)
	}
	s.Annotations = map[string]string{api.AnnotationVolumes: `[{"image":"/v/a.ext4","staging":"/run/gvx/volumes/ns/id/0","readonly":true}]`}
	v, err := FromSpec(s)
	if err != nil || len(v) != 1 || v[0].Image != "/v/a.ext4" || !v[0].ReadOnly {
		t.Errorf("FromSpec = %+v, %v", v, err)
	}
	for _, bad := range []string{`{`, `[{"image":"rel.ext4","staging":"/s"}]`, `[{"image":"/a","staging":"rel"}]`} {
		s.Annotations[api.AnnotationVolumes] = bad
		if _, err := FromSpec(s); err == nil || !strings.Contains(err.Error(), api.AnnotationVolumes) {
			t.Errorf("FromSpec(%q): err = %v, want one naming the annotation", bad, err)
		}
	}
}

// TestMountIntoRefusesNonGofer: MountInto mounts only into a process with
// a mount and a user namespace of its own — this test's process has
// neither — and names why; a missing process is an error too.
func TestMountIntoRefusesNonGofer(t *testing.T) {
	vols := []api.Volume{{Image: "/nonexistent.ext4", Destination: "/work"}}
	err := MountInto(os.Getpid(), vols)
	if err == nil || !strings.Contains(err.Error(), "no sandbox's gofer") {
		t.Errorf("MountInto this process: %v, want a refusal saying it is no sandbox's gofer", err)
	}
	if err := MountInto(1<<22+1, vols); err == nil {
		t.Error("MountInto a process that does not exist: no error")
	}
}
