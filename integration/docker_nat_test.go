package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/dind"
)

// TestDockerNAT: the docker tests' key steps in a docker-mode sandbox on
// network = "nat". dockerd pulls an image from a registry the test runs
// on the host's 127.0.0.1, reached as 10.0.2.2 only because the policy
// allows its port (a second registry on another port is refused: the
// pull fails, the NAT counts it and that registry sees no request);
// docker build runs FROM the pulled image; `docker run -p 8080:80`
// answers inside the sandbox and, through the sandbox's published port,
// on the host; a compose project's services reach each other by name.
func TestDockerNAT(t *testing.T) {
	base, ctx := dindEnv(t)
	checkNoLeaks(t)
	archive := filepath.Join(e.images, "busybox.tar")
	reg := startRegistry(t, archive, "gvx/busybox", "nat", map[string]string{"nat-marker": "from-the-loopback-registry\n"})
	closed := startRegistry(t, archive, "gvx/busybox", "nat", nil)
	hostPort := freePort(t)
	r := &dind.Runner{
		Client:  base.Client,
		Network: sdk.NetworkNAT,
		NAT: &sdk.NAT{
			Ports:       []string{fmt.Sprintf("%d:8080", hostPort)},
			EgressAllow: []string{fmt.Sprintf("10.0.2.2:%d", reg.port)},
		},
		Env: []string{fmt.Sprintf("GVX_DOCKERD_ARGS=--insecure-registry=10.0.2.2:%d --insecure-registry=10.0.2.2:%d", reg.port, closed.port)},
	}
	id := "dknat"
	ep := startEpisode(t, r, ctx, id)
	defer logNATOnFailure(t, id)()
	t.Logf("NAT docker episode: dockerd ready after %s", ep.Ready)

	if out := sbRun(t, ctx, ep.Sandbox, "ip -4 addr show eth0"); !strings.Contains(out, "10.0.2.15/24") {
		t.Fatalf("the docker sandbox has no NAT eth0:\n%s", out)
	}
	image := reg.ref("10.0.2.2")
	t.Run("pull", func(t *testing.T) {
		out := sbRun(t, ctx, ep.Sandbox, fmt.Sprintf("docker pull -q %s >/dev/null && docker run --rm --pull never %s cat /nat-marker", image, image))
		if strings.TrimSpace(out) != "from-the-loopback-registry" {
			t.Errorf("run of the pulled image printed %q", out)
		}
		if reg.manifests.Load() == 0 || reg.blobsGot.Load() < 2 {
			t.Errorf("the loopback registry served %d manifests and %d blobs: the pull did not come from it", reg.manifests.Load(), reg.blobsGot.Load())
		}
	})
	t.Run("pull-refused", func(t *testing.T) {
		var before int64
		waitFor(t, "the registry flows in the NAT's counters", func() bool {
			st := natStats(t, id)
			before = st.Refused
			return st.HostSockets > 0
		})
		var out, errb strings.Builder
		code, err := ep.Exec(ctx, &out, &errb, "docker", "pull", "-q", closed.ref("10.0.2.2"))
		if err != nil || code == 0 {
			t.Fatalf("pull from the registry the policy does not allow: exit %d %v (want a failure)\n%s%s", code, err, out.String(), errb.String())
		}
		if n := closed.requests.Load(); n != 0 {
			t.Errorf("the registry on the refused port saw %d requests", n)
		}
		waitFor(t, "the refusal in the NAT's counters", func() bool { return natStats(t, id).Refused > before })
		t.Logf("refused pull: %s", strings.TrimSpace(errb.String()))
	})
	t.Run("build", func(t *testing.T) {
		df := strings.ReplaceAll(dockerfile, "gvx.test/busybox:latest", image)
		out := sbRun(t, ctx, ep.Sandbox, fmt.Sprintf(`set -e; mkdir -p /bn && cd /bn
echo hello-ctx > hello.txt
cat > Dockerfile <<'DOCKERFILE'
%sDOCKERFILE
docker build -q -t gvx-test/built-nat . >/dev/null
docker run --rm gvx-test/built-nat`, df))
		if !strings.Contains(out, "built-in-stage-one") || !strings.Contains(out, "hello-ctx") {
			t.Errorf("docker build result printed %q", out)
		}
	})
	t.Run("run-publish", func(t *testing.T) {
		sbRun(t, ctx, ep.Sandbox, fmt.Sprintf(`set -e
docker run -d --name web -p 8080:80 %s sh -c 'mkdir -p /www && echo web-through-nat > /www/index.html && exec httpd -f -p 80 -h /www' >/dev/null`, image))
		out := sbRun(t, ctx, ep.Sandbox, `for i in $(seq 40); do busybox wget -qO- http://127.0.0.1:8080/ && exit 0; sleep 0.25; done; exit 1`)
		if strings.TrimSpace(out) != "web-through-nat" {
			t.Errorf("docker run -p inside the sandbox: %q", out)
		}
		got, err := httpGetRetry(ctx, fmt.Sprintf("http://127.0.0.1:%d/", hostPort), 20*time.Second)
		if err != nil || strings.TrimSpace(got) != "web-through-nat" {
			t.Errorf("docker run -p through the sandbox's published port %d: %q, %v", hostPort, got, err)
		}
		sbRun(t, ctx, ep.Sandbox, "docker rm -f web >/dev/null")
	})
	t.Run("compose", func(t *testing.T) {
		cf := strings.ReplaceAll(composeFile, "gvx.test/busybox:latest", image)
		out := sbRun(t, ctx, ep.Sandbox, fmt.Sprintf(`set -e; mkdir -p /cn && cd /cn
cat > docker-compose.yml <<'COMPOSE'
%sCOMPOSE
docker-compose up --no-color --abort-on-container-exit --exit-code-from client 2>/dev/null
docker-compose down >/dev/null 2>&1`, cf))
		if !strings.Contains(out, "compose-web-ok") {
			t.Errorf("compose client did not reach web by name:\n%s", out)
		}
	})
}

// httpGetRetry GETs url until it answers or wait has passed.
func httpGetRetry(ctx context.Context, url string, wait time.Duration) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	var last error
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		resp, err := c.Do(req)
		if err != nil {
			last = err
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b), err
	}
	return "", last
}
