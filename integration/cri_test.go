package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/integration/harness"
)

// criEnv is a private containerd with CRI set up for gvx: the runtime
// handler "gvx", a local pause image, and a bridge CNI network of its own.
type criEnv struct {
	ctrd   *harness.Containerd
	crictl string
	dir    string
}

const criBridge = "gvxcri0"

func newCRIEnv(t *testing.T) *criEnv {
	t.Helper()
	requireEnv(t)
	crictlBin := os.Getenv("CRICTL_BIN")
	if crictlBin == "" {
		t.Skip("CRICTL_BIN not set (make integration builds crictl)")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "cni"), 0o755); err != nil {
		t.Fatal(err)
	}
	// host-local IPAM keeps its leases here; the test's own directory.
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"gvxcri","plugins":[
  {"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":false,
   "ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.0.0/24"}]],"dataDir":%q}},
  {"type":"loopback"}]}`, criBridge, filepath.Join(dir, "ipam"))
	if err := os.WriteFile(filepath.Join(dir, "cni", "10-gvxcri.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := harness.StartWithConfig(context.Background(), harness.BinsFromEnv(), fmt.Sprintf(`
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "gvx.test/pause:latest"
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = %q
`, filepath.Join(dir, "cni")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		_ = exec.Command("ip", "link", "del", criBridge).Run()
	})
	x := &criEnv{ctrd: c, crictl: filepath.Join(crictlBin, "crictl"), dir: dir}
	for _, img := range []string{"busybox.tar", "pause.tar"} {
		r, err := e.run(context.Background(), "", filepath.Join(e.ctrdBin, "ctr"), "--address", c.Socket(), "--namespace", "k8s.io",
			"images", "import", filepath.Join(e.images, img))
		if err != nil || r.code != 0 {
			t.Fatalf("import %s: %v %s", img, err, r.stderr)
		}
	}
	return x
}

func (x *criEnv) run(t *testing.T, args ...string) result {
	t.Helper()
	full := append([]string{"--runtime-endpoint", "unix://" + x.ctrd.Socket(), "--image-endpoint", "unix://" + x.ctrd.Socket(), "--timeout", "60s"}, args...)
	r, err := e.run(context.Background(), "", x.crictl, full...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (x *criEnv) must(t *testing.T, args ...string) string {
	t.Helper()
	r := x.run(t, args...)
	if r.code != 0 {
		t.Fatalf("crictl %s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return strings.TrimSpace(r.stdout)
}

func (x *criEnv) writeJSON(t *testing.T, name string, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(x.dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCRIPod: a Kubernetes-style pod through CRI (crictl, runtime handler
// gvx): the pod's application container runs in its own gVisor sandbox on
// the pod's network (an address from the pod's CNI network), logs, exec
// and exit codes work, a second application container is refused with a
// clear error, and removing the pod leaves nothing behind.
func TestCRIPod(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	podCfg := x.writeJSON(t, "pod.json", map[string]any{
		"metadata":      map[string]string{"name": "p1", "namespace": "default", "uid": "uid-p1"},
		"log_directory": filepath.Join(x.dir, "logs"),
		"linux":         map[string]any{},
	})
	pod := x.must(t, "runp", "--runtime", "gvx", podCfg)
	t.Cleanup(func() {
		x.run(t, "stopp", pod)
		x.run(t, "rmp", "-f", pod)
	})
	ctrCfg := x.writeJSON(t, "app.json", map[string]any{
		"metadata": map[string]string{"name": "app"},
		"image":    map[string]string{"image": "gvx.test/busybox:latest"},
		"command":  []string{"sh", "-c", "echo app-started; uname -r; ip -4 -o addr show; sleep 600"},
		"log_path": "app.log",
	})
	app := x.must(t, "create", pod, ctrCfg, podCfg)
	x.must(t, "start", app)

	var logs string
	for i := 0; i < 100 && !strings.Contains(logs, "app-started"); i++ {
		time.Sleep(50 * time.Millisecond)
		logs = x.run(t, "logs", app).stdout
	}
	if !strings.Contains(logs, "app-started") || !strings.Contains(logs, "gvisor") {
		t.Errorf("app logs %q: want app-started and gVisor's kernel", logs)
	}
	if !strings.Contains(logs, "10.77.0.") {
		t.Errorf("app logs %q: want an address of the pod network 10.77.0.0/24", logs)
	}
	if out := x.must(t, "exec", app, "sh", "-c", "echo exec-in-pod"); out != "exec-in-pod" {
		t.Errorf("crictl exec: %q", out)
	}

	second := x.writeJSON(t, "second.json", map[string]any{
		"metadata": map[string]string{"name": "second"},
		"image":    map[string]string{"image": "gvx.test/busybox:latest"},
		"command":  []string{"true"},
	})
	// crictl create only records the container; the runtime sees it at
	// start.
	secondID := x.must(t, "create", pod, second, podCfg)
	r := x.run(t, "start", secondID)
	if r.code == 0 || !strings.Contains(r.stderr, "one application container per pod") {
		t.Errorf("second application container: exit %d %q, want a clear refusal", r.code, r.stderr)
	}
	x.must(t, "rm", secondID)

	x.must(t, "stop", "--timeout", "1", app)
	insp := x.must(t, "inspect", "--output", "go-template", "--template", "{{.status.state}} {{.status.exitCode}}", app)
	if !strings.HasPrefix(insp, "CONTAINER_EXITED") {
		t.Errorf("after stop: %q, want CONTAINER_EXITED", insp)
	}
	x.must(t, "rm", app)
	x.must(t, "stopp", pod)
	x.must(t, "rmp", pod)
}
