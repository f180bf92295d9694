package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/containerd/v2/pkg/cio"
	coci "github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
)

// TestAdmission: above the memory or disk threshold a new sandbox is
// refused with ResourceExhausted and a message naming the threshold,
// leaving nothing behind; at a threshold the node is below, it runs.
func TestAdmission(t *testing.T) {
	c, ctx, img := clientEnv(t)
	checkNoLeaks(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, toml, want string
	}{
		{"memory", "[admission]\nmemory_percent = 0.1\n", "admission.memory_percent = 0.1"},
		{"disk", fmt.Sprintf("[admission]\ndisk_percent = 0.001\ndisk_paths = [%q]\n", dir), "admission.disk_percent = 0.001"},
	} {
		cfg := write(tc.name+".toml", tc.toml)
		id := "adm-" + tc.name
		cont := newContainerWith(t, c, ctx, img, id, &runtimeoptions.Options{ConfigPath: cfg}, coci.WithProcessArgs("true"))
		_, err := cont.NewTask(ctx, cio.NullIO)
		if err == nil {
			t.Fatalf("%s: the sandbox was admitted", tc.name)
		}
		if !errdefs.IsResourceExhausted(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v (want ResourceExhausted naming %s)", tc.name, err, tc.want)
		}
		r, err := e.ctrResult(ctx, "run", "--rm", "--runtime", runtime, "--runtime-config-path", cfg, busybox, id+"-ctr", "true")
		if err != nil || r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: ctr run: exit %d, %v: %s", tc.name, r.code, err, r.stderr)
		}
		_, _ = e.ctrResult(ctx, "container", "rm", id+"-ctr")
	}
	ok := write("ok.toml", fmt.Sprintf("[admission]\nmemory_percent = 100\ndisk_percent = 100\ndisk_paths = [%q]\n", dir))
	if out := mustCtr(t, "run", "--rm", "--runtime", runtime, "--runtime-config-path", ok, busybox, "adm-ok", "echo", "admitted"); strings.TrimSpace(out) != "admitted" {
		t.Errorf("below the thresholds: %q", out)
	}
}
