package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/integration/harness"
)

// TestCRIBidirectionalRefused: a container whose hostPath mount asks for
// Bidirectional propagation (CRI: the mount rshared, the root filesystem
// rshared) cannot have it in a gVisor sandbox. Its start is refused with
// an error that says why and what to use instead, before gvx mounts
// anything — no mount is left on the host, however often it is tried —
// and the pod runs on.
func TestCRIBidirectionalRefused(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	// containerd requires the source of a Bidirectional mount to be on a
	// shared mount: a private bind mount of the test's own, made shared.
	src := t.TempDir()
	// Readable by the sandbox's unprivileged host uid (t.TempDir's are
	// 0700).
	for _, d := range []string{src, filepath.Dir(src)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"--bind", src, src}, {"--make-rshared", src}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", src).Run() })
	pod, podCfg := x.runPod(t, "pshared", "gvx")
	before := harness.MountsUnder("/")
	for i := 0; i < 2; i++ {
		id := x.createContainer(t, pod, podCfg, "shared"+string(rune('a'+i)), []string{"sleep", "600"},
			map[string]any{"mounts": []map[string]any{{"container_path": "/mnt/shared", "host_path": src, "propagation": 2}}})
		r := x.run(t, "start", id)
		if r.code == 0 || !strings.Contains(r.stderr, "rootfsPropagation") || !strings.Contains(r.stderr, "rshared") || !strings.Contains(r.stderr, "is not supported") || !strings.Contains(r.stderr, "HostToContainer") {
			t.Errorf("start with Bidirectional propagation: exit %d %q, want a refusal naming rshared and HostToContainer", r.code, r.stderr)
		}
		x.must(t, "rm", id)
	}
	if after := harness.MountsUnder("/"); !slices.Equal(before, after) {
		var added []string
		for _, m := range after {
			if !slices.Contains(before, m) {
				added = append(added, m)
			}
		}
		t.Errorf("refused starts left host mounts behind: %q", added)
	}
	// HostToContainer propagation works.
	id := x.createContainer(t, pod, podCfg, "slave", []string{"sh", "-c", "grep -q ' /mnt/shared ' /proc/mounts && echo mounted"},
		map[string]any{"mounts": []map[string]any{{"container_path": "/mnt/shared", "host_path": src, "propagation": 1}}, "log_path": "slave.log"})
	x.must(t, "start", id)
	if st := x.waitExited(t, id); st != "CONTAINER_EXITED 0" {
		t.Errorf("HostToContainer container: %q (logs %q)", st, x.run(t, "logs", id).stdout)
	}
	x.must(t, "rmp", "-f", pod)
}
