package shim

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api/contracttest"
	"github.com/gvxrun/gvx/sandbox"
)

// The shim's side of the contract with gvx-sentry, checked against
// contract.json rather than package api (sentry/… has the same tests for
// the other side).

func loadContract(t *testing.T) *contracttest.Contract {
	t.Helper()
	c, err := contracttest.Load()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestContractVolumes(t *testing.T) {
	c := loadContract(t)
	s := &specs.Spec{}
	if err := setVolumes(s, c.Volumes.Decoded); err != nil {
		t.Fatal(err)
	}
	if got := s.Annotations[c.Name("annotation_volumes")]; got != c.Volumes.Annotation {
		t.Errorf("volumes annotation %q, contract.json says %q", got, c.Volumes.Annotation)
	}
}

func TestContractPoolAnnotations(t *testing.T) {
	c := loadContract(t)
	sb := &sandbox.Sandbox{ID: "gvxpool-1"}
	s := &specs.Spec{Linux: &specs.Linux{CgroupsPath: "/x"}}
	enterPoolSandbox(s, sb, true, false)
	if s.Annotations[c.Name("annotation_pool_exec")] != sb.ID || len(s.Annotations) != 1 {
		t.Errorf("process in a pool sandbox: annotations %v", s.Annotations)
	}
	s = &specs.Spec{Linux: &specs.Linux{CgroupsPath: "/x"}}
	enterPoolSandbox(s, sb, false, false)
	want := map[string]string{
		c.Name("cri_container_type"):      c.Name("cri_role_container"),
		c.Name("cri_sandbox_id"):          sb.ID,
		c.Name("annotation_pool_sandbox"): sb.ID,
		c.Name("cri_container_name"):      poolTaskName, // what a restore finds it by
	}
	if len(s.Annotations) != len(want) {
		t.Errorf("container in a pool sandbox: annotations %v, want %v", s.Annotations, want)
	}
	for k, v := range want {
		if s.Annotations[k] != v {
			t.Errorf("container in a pool sandbox: annotation %s = %q, want %q", k, s.Annotations[k], v)
		}
	}
	// Reset: the container's delete leaves the sandbox to the shim.
	s = &specs.Spec{Linux: &specs.Linux{CgroupsPath: "/x"}}
	enterPoolSandbox(s, sb, false, true)
	if _, ok := s.Annotations[c.Name("annotation_pool_sandbox")]; ok || len(s.Annotations) != 3 {
		t.Errorf("container in a pool sandbox that is reset: annotations %v, want the CRI ones only", s.Annotations)
	}
	// A name the task has (CRI's) stays.
	s = &specs.Spec{Linux: &specs.Linux{CgroupsPath: "/x"}, Annotations: map[string]string{c.Name("cri_container_name"): "app"}}
	enterPoolSandbox(s, sb, false, true)
	if got := s.Annotations[c.Name("cri_container_name")]; got != "app" {
		t.Errorf("a named container in a pool sandbox is named %q, want app", got)
	}
}

func TestContractSentryLink(t *testing.T) {
	c := loadContract(t)
	bin, dir := t.TempDir(), filepath.Join(t.TempDir(), "task")
	sentry, front := filepath.Join(bin, c.Name("sentry_binary")), filepath.Join(bin, c.Name("runtime_binary"))
	for _, f := range []string{sentry, front} {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link, err := taskSentry(dir, sentry, "--debug", true)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(link) != c.Name("sentry_binary") {
		t.Errorf("link %s: gvx-sentry's flags file is found next to argv[0] named %s", link, c.Name("sentry_binary"))
	}
	if target, _ := os.Readlink(link); target != front {
		t.Errorf("link -> %s, want the front %s", target, front)
	}
	if data, err := os.ReadFile(filepath.Join(dir, c.Name("flags_file"))); err != nil || string(data) != "--debug" {
		t.Errorf("flags file %s: %q, %v", c.Name("flags_file"), data, err)
	}
}

func TestContractRuntimeType(t *testing.T) {
	c := loadContract(t)
	if (manager{}).Name() != c.Name("runtime_type") {
		t.Errorf("runtime type %s, contract.json says %s", (manager{}).Name(), c.Name("runtime_type"))
	}
}

// TestContractExecGuestPid: the shim reads an exec's guest pid where
// gvx-sentry and gvx-runtime write it, beside containerd's runc shim's pid
// file of the exec, and removes it with the exec.
func TestContractExecGuestPid(t *testing.T) {
	c := loadContract(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "e1.pid"+c.Name("exec_guest_pid_suffix"))
	if err := os.WriteFile(p, []byte("42"), 0o644); err != nil {
		t.Fatal(err)
	}
	if pid, err := execGuestPid(dir, "e1"); err != nil || pid != 42 {
		t.Errorf("execGuestPid = %d, %v; want 42", pid, err)
	}
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := execGuestPid(dir, "e1"); err == nil {
		t.Error("a bad guest pid file read without error")
	}
	removeExecGuestPid(context.Background(), dir, "e1")
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("guest pid file left after the exec's delete: %v", err)
	}
}
