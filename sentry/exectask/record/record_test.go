package record

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
)

func TestCreateRefusals(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	task := func(edit func(*specs.Spec)) *specs.Spec {
		s := &specs.Spec{Process: &specs.Process{Args: []string{"true"}, Cwd: "/"}, Annotations: map[string]string{api.AnnotationPoolExec: "sb1"}}
		if edit != nil {
			edit(s)
		}
		return s
	}
	for _, tc := range []struct {
		name string
		spec *specs.Spec
		want string
	}{
		{"no annotation", task(func(s *specs.Spec) { s.Annotations = nil }), "annotation"},
		{"terminal", task(func(s *specs.Spec) { s.Process.Terminal = true }), "terminal"},
		{"no sandbox", task(nil), "sandbox sb1"},
	} {
		err := Create(root, "t1", dir, tc.spec, exec.Command("/bin/true"), filepath.Join(dir, "pid"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one naming %q", tc.name, err, tc.want)
		}
		if Exists(root, "t1") {
			t.Errorf("%s: a record was left behind", tc.name)
		}
	}
	if err := os.WriteFile(api.SentryRoot(root).SandboxState("sb1"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Create(root, "t1", dir, task(nil), exec.Command("/nonexistent/monitor"), filepath.Join(dir, "pid")); err == nil {
		t.Error("a monitor that cannot start: no error")
	}
	if Exists(root, "t1") {
		t.Error("record left behind after the monitor failed to start")
	}
	if err := Create(root, "t1", dir, task(nil), exec.Command("/bin/true"), filepath.Join(dir, "pid")); err != nil {
		t.Fatal(err)
	}
	r, err := Load(root, "t1")
	if err != nil || r.Sandbox != "sb1" || r.Bundle != dir || r.Pid != 0 {
		t.Errorf("record %+v (%v)", r, err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "pid")); err != nil || len(data) == 0 {
		t.Errorf("pid file: %q (%v)", data, err)
	}
	if err := Create(root, "t1", dir, task(nil), exec.Command("/bin/true"), filepath.Join(dir, "pid")); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("second create of t1: err = %v", err)
	}
}
