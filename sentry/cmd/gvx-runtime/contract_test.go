package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/sentry/internal/contractroot"
)

// TestContract: gvx-runtime runs contract.json's sentry binary beside it;
// it creates a task whose spec carries the pool-exec annotation itself,
// its record where the layout puts it; a kill of a task whose monitor is
// gone says the not_running phrase; a waiter whose monitor is gone exits
// with exit_killed.
func TestContract(t *testing.T) {
	c := contractroot.Load(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, c.Name("sentry_binary")), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := sentryPath(filepath.Join(dir, c.Name("runtime_binary"))); err != nil || p != filepath.Join(dir, c.Name("sentry_binary")) {
		t.Errorf("sentryPath = %q, %v", p, err)
	}

	root, bundle := t.TempDir(), t.TempDir()
	spec, _ := json.Marshal(specs.Spec{Process: &specs.Process{Args: []string{"true"}, Cwd: "/"}, Annotations: map[string]string{c.Name("annotation_pool_exec"): "sb"}})
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), spec, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(contractroot.Path(t, c, root, "sandbox_state"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := command{globals: []string{c.Name("runtime_binary")}, root: root, sub: "create", sentry: "/bin/true",
		args: []string{"--bundle", bundle, "--pid-file", filepath.Join(bundle, "pid"), "t1"}}
	if handled, err := fast["create"](cmd); !handled || err != nil {
		t.Fatalf("create of a task: handled %v, %v", handled, err)
	}
	if _, err := os.Stat(contractroot.Path(t, c, root, "task_record")); err != nil {
		t.Errorf("no record at contract.json's task_record: %v", err)
	}

	if _, err := hangingMonitor(t, t.TempDir(), "t1").kill(); err == nil || !strings.Contains(err.Error(), c.Name("not_running")) {
		t.Errorf("kill of a task whose monitor is gone: %v, want %q", err, c.Name("not_running"))
	}

	// The monitor's ends of the waiter's connections close: it went away.
	var conns [2]*net.UnixConn
	for i := range conns {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fds[1])
		if conns[i], err = fileConnOf(os.NewFile(uintptr(fds[0]), "waiter")); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close()
	}
	if got := waitMonitor(conns[0], conns[1], 7, 0, 0); got != c.ExitKilled {
		t.Errorf("waiter whose monitor is gone exits %d; contract.json says %d", got, c.ExitKilled)
	}
	if got := waitMain([]string{t.TempDir(), "t1", "7", "0", "0"}); got != 2 {
		t.Errorf("waiter without its mode argument exits %d, want 2 (usage)", got)
	}
}
