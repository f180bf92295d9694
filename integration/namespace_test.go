package integration

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/integration/harness"
)

// ctrIn runs ctr against the private containerd in namespace ns.
func ctrIn(t *testing.T, ns string, args ...string) result {
	t.Helper()
	r, err := e.ctrResultIn(context.Background(), ns, args...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSameIDTwoNamespaces: containerd lets two namespaces run a task of
// the same id. With gvx both run side by side, a task booting its own
// sandbox and one adopting a pool's alike: execs in each reach its own
// sandbox, and deleting one namespace's task leaves the other's working
// (exec, kill, delete) — before the task directory was per namespace, the
// first delete removed the other's link to gvx-sentry (its execs and
// kills then failed, and it could not be killed), and a pool task's
// delete removed the other's gVisor state.
func TestSameIDTwoNamespaces(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	other := "gvxtest-other"
	if r := ctrIn(t, other, "images", "import", filepath.Join(e.images, "busybox.tar")); r.code != 0 {
		t.Fatalf("import busybox into %s: %s", other, r.stderr)
	}
	t.Cleanup(func() {
		ctrIn(t, other, "images", "rm", busybox)
		ctrIn(t, other, "namespaces", "rm", other)
	})
	p := startPool(t, 2)
	for _, tc := range []struct {
		name string
		opts []string
	}{
		{"own sandbox", nil},
		{"pool sandbox", []string{"--runtime-config-path", p.Config}},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "-"), func(t *testing.T) {
			id := "sameid-" + strings.ReplaceAll(tc.name, " ", "-")
			cleanupTask(t, id)
			t.Cleanup(func() {
				ctrIn(t, other, "task", "kill", "-s", "KILL", id)
				time.Sleep(200 * time.Millisecond)
				ctrIn(t, other, "task", "rm", "-f", id)
				ctrIn(t, other, "container", "rm", id)
			})
			run := append(append([]string{"run", "-d", "--runtime", runtime}, tc.opts...), busybox, id, "sleep", "120")
			mustCtr(t, run...)
			if r := ctrIn(t, other, run...); r.code != 0 {
				t.Fatalf("the same id in %s: %s", other, r.stderr)
			}
			if tc.opts != nil {
				if adopted(id) == "" || harness.Adopted(other, id) == "" {
					t.Fatalf("both tasks should adopt a pool sandbox: %q, %q; pool log:\n%s", adopted(id), harness.Adopted(other, id), p.Log())
				}
			}
			// Each namespace's exec runs in its own sandbox: a file one
			// writes, the other does not see.
			for _, ns := range []string{testNS, other} {
				if r := ctrIn(t, ns, "task", "exec", "--exec-id", "w", id, "sh", "-c", "echo "+ns+" > /tmp/ns"); r.code != 0 {
					t.Fatalf("exec in %s: %d %s", ns, r.code, r.stderr)
				}
			}
			for _, ns := range []string{testNS, other} {
				if r := ctrIn(t, ns, "task", "exec", "--exec-id", "r", id, "cat", "/tmp/ns"); r.code != 0 || r.stdout != ns+"\n" {
					t.Errorf("exec in %s read %q (%d %s), want its own sandbox's file", ns, r.stdout, r.code, r.stderr)
				}
			}
			// Delete the other namespace's task; ours works on.
			if r := ctrIn(t, other, "task", "kill", "-s", "KILL", id); r.code != 0 {
				t.Fatalf("kill in %s: %s", other, r.stderr)
			}
			deadline := time.Now().Add(15 * time.Second)
			for {
				r := ctrIn(t, other, "task", "rm", id)
				if r.code == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("task rm in %s: %s", other, r.stderr)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if r := ctrIn(t, other, "container", "rm", id); r.code != 0 {
				t.Fatalf("container rm in %s: %s", other, r.stderr)
			}
			if r := ctrExec(t, id, "after", "cat", "/tmp/ns"); r.code != 0 || r.stdout != testNS+"\n" {
				t.Errorf("exec in %s after %s's task of the same id was deleted: %q (%d %s)", testNS, other, r.stdout, r.code, r.stderr)
			}
			if got := taskStatus(t, id); got != "RUNNING" {
				t.Errorf("%s's task after %s's was deleted: %s", testNS, other, got)
			}
			deleteTask(t, id)
		})
	}
}
