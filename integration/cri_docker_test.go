package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
)

// TestCRIPodDocker: a docker-mode pod as deploy/examples/agent-sandbox
// runs one — the pod annotation dev.gvx.docker, the dind image, and
// /var/lib/docker on an ext4lite volume given as a hostPath file (a clone
// of the golden volume, busybox preloaded) — runs inner containers on
// overlay2 through crictl exec, first on a sandbox of its own, then on
// one adopted from a docker pool (a pool whose config has [docker]
// enabled). Removing each pod leaves its volume clean and nothing else.
func TestCRIPodDocker(t *testing.T) {
	dindEnv(t)
	checkNoLeaks(t)
	p := startPoolWith(t, 1, "[docker]\nenabled = true\n")
	x := newCRIEnvWith(t, fmt.Sprintf(`
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.gvxdockpool]
  runtime_type = %q
  pod_annotations = [%q]
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.gvxdockpool.options]
  ConfigPath = %q
`, api.RuntimeType, api.AnnotationDocker, p.Config))
	r, err := e.run(context.Background(), "", filepath.Join(e.ctrdBin, "ctr"), "--address", x.ctrd.Socket(), "--namespace", "k8s.io",
		"images", "import", filepath.Join(e.images, "dind.tar"))
	if err != nil || r.code != 0 {
		t.Fatalf("import the dind image: %v %s", err, r.stderr)
	}
	for _, tc := range []struct {
		name, handler string
		pooled        bool
	}{{"dkown", "gvxanno", false}, {"dkpool", "gvxdockpool", true}} {
		t.Run(tc.name, func(t *testing.T) {
			vol := filepath.Join(filepath.Dir(golden), tc.name+".ext4")
			gvx(t, "volume", "clone", golden, vol)
			t.Cleanup(func() { os.Remove(vol) })
			pod, podCfg := x.runPodWith(t, tc.name, tc.handler, map[string]string{api.AnnotationDocker: "true"})
			if sb := harness.Adopted("k8s.io", pod); (sb != "") != tc.pooled {
				t.Errorf("pod %s: adopted pool sandbox %q, want one: %v (pool log:\n%s)", pod, sb, tc.pooled, p.Log())
			}
			id := x.createContainer(t, pod, podCfg, "dockerd", nil, map[string]any{
				"image":    map[string]string{"image": dindImage},
				"mounts":   []map[string]any{{"container_path": "/var/lib/docker", "host_path": vol}},
				"log_path": "dockerd.log",
			})
			t0 := time.Now()
			x.must(t, "start", id)
			const script = "docker info --format '{{.Driver}}' && docker run --rm --pull never gvx.test/busybox:latest echo inner-ok"
			var last result
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				last = x.run(t, "exec", id, "sh", "-c", script)
				if last.code == 0 {
					break
				}
			}
			if last.code != 0 || !strings.Contains(last.stdout, "overlay2") || !strings.Contains(last.stdout, "inner-ok") {
				t.Errorf("docker in the pod: exit %d stdout %q stderr %q; dockerd's log:\n%s", last.code, last.stdout, last.stderr, x.run(t, "logs", id).stdout)
			}
			t.Logf("%s: the first inner docker run done %v after the dind container's start (pooled sandbox: %v)", tc.name, time.Since(t0).Round(time.Millisecond), tc.pooled)
			x.must(t, "stop", "--timeout", "10", id)
			x.must(t, "rm", id)
			x.must(t, "stopp", pod)
			x.must(t, "rmp", pod)
			fsckClean(t, vol)
		})
	}
}
