package volmount

import (
	"os"
	"reflect"
	"slices"
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

// TestNeeded: a create needs a private mount namespace for ext4lite
// volumes and for host binds gvx-sentry clones (a source the sandbox's
// uids do not own), not for a bind the sandbox's uids own or a spec
// without binds; the spec is left as it was.
func TestNeeded(t *testing.T) {
	src := t.TempDir()
	mapping := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
	withBind := func(annotations map[string]string) *specs.Spec {
		return &specs.Spec{
			Annotations: annotations,
			Mounts: []specs.Mount{
				{Destination: "/proc", Type: "proc", Source: "proc"},
				{Destination: "/data", Type: "bind", Source: src, Options: []string{"rbind", "rw"}},
			},
			Linux: &specs.Linux{UIDMappings: mapping, GIDMappings: mapping},
		}
	}
	for _, tc := range []struct {
		name  string
		owner int // of the bind's source
		spec  *specs.Spec
		want  bool
	}{
		{"root's bind", 0, withBind(nil), true},
		{"the sandbox's own bind", 100000, withBind(nil), false},
		{"volumes", 100000, withBind(map[string]string{api.AnnotationVolumes: `[{"image":"/v/a.ext4","staging":"/s/0"}]`}), true},
		{"no binds", 0, &specs.Spec{Mounts: []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}}}, false},
	} {
		if err := os.Chown(src, tc.owner, tc.owner); err != nil {
			t.Skipf("chown (needs root): %v", err)
		}
		before := slices.Clone(tc.spec.Mounts)
		got, err := Needed(tc.spec)
		if err != nil || got != tc.want {
			t.Errorf("%s: Needed = %v, %v; want %v", tc.name, got, err, tc.want)
		}
		if !reflect.DeepEqual(before, tc.spec.Mounts) {
			t.Errorf("%s: the spec's mounts changed: %+v → %+v", tc.name, before, tc.spec.Mounts)
		}
	}
	if _, err := Needed(&specs.Spec{Annotations: map[string]string{api.AnnotationVolumes: `{`}}); err == nil {
		t.Error("Needed of a bad volumes annotation: no error")
	}
}

// TestUnshareForExec: the calling thread, and it alone, is in a new mount
// namespace afterwards, and the environment returned marks it for
// gvx-sentry (the caller's is not changed).
func TestUnshareForExec(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a new mount namespace)")
	}
	own, err := os.Readlink("/proc/thread-self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"A=1"}
	type result struct {
		env []string
		ns  string
		err error
	}
	done := make(chan result, 1)
	go func() { // its thread stays locked and ends with it
		out, err := UnshareForExec(env)
		ns, _ := os.Readlink("/proc/thread-self/ns/mnt")
		done <- result{out, ns, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.ns == own || r.ns == "" {
		t.Errorf("the thread's mount namespace %q, the process's %q: want a new one", r.ns, own)
	}
	// This goroutine runs on another thread now (that one is locked).
	if after, _ := os.Readlink("/proc/thread-self/ns/mnt"); after != own {
		t.Errorf("another thread's mount namespace changed: %q → %q", own, after)
	}
	if len(env) != 1 || len(r.env) != 2 || r.env[1] != reexecEnv+"=1" {
		t.Errorf("environment %q (caller's %q), want the caller's and %s=1", r.env, env, reexecEnv)
	}
}
