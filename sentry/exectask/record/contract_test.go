package record

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/sentry/internal/contractroot"
)

// TestContract: a task is one whose spec carries contract.json's pool-exec
// annotation; its record, the sandbox state create looks for and the
// monitor's socket are where contract.json's layout puts them.
func TestContract(t *testing.T) {
	c := contractroot.Load(t)
	root, dir := t.TempDir(), t.TempDir()
	spec := &specs.Spec{Process: &specs.Process{Args: []string{"true"}, Cwd: "/"}, Annotations: map[string]string{c.Name("annotation_pool_exec"): "sb"}}
	if !IsTask(spec) {
		t.Fatalf("a spec with %s is not a task", c.Name("annotation_pool_exec"))
	}
	if err := os.WriteFile(contractroot.Path(t, c, root, "sandbox_state"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Create(root, "t1", dir, spec, exec.Command("true"), filepath.Join(dir, "pid")); err != nil {
		t.Fatalf("create with the sandbox's state at contract.json's sandbox_state: %v", err)
	}
	if r, err := Load(root, "t1"); err != nil || r.Sandbox != "sb" {
		t.Errorf("record %+v, %v", r, err)
	}
	for _, key := range []string{"task_record", "monitor_socket"} {
		if _, err := os.Lstat(contractroot.Path(t, c, root, key)); err != nil {
			t.Errorf("nothing at contract.json's %s: %v", key, err)
		}
	}
}
