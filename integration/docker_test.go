package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"

	sdk "github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/dind"
	"github.com/gvxrun/gvx/integration/harness"
)

const dindImage = "gvx.test/dind:latest"

var (
	dindOnce sync.Once
	dindErr  error
	golden   string // built once, shared by the docker tests (read-only)
)

// dindEnv imports the dind image and builds a golden volume with the
// busybox image preloaded, once for all docker tests.
func dindEnv(t *testing.T) (*dind.Runner, context.Context) {
	t.Helper()
	requireEnv(t)
	archive := filepath.Join(e.images, "dind.tar")
	if _, err := os.Stat(archive); err != nil {
		t.Skipf("dind image not built (%v): run `make images`", err)
	}
	c, err := sdk.Connect(context.Background(), sdk.Options{Containerd: e.Socket(), Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	ctx := namespaces.WithNamespace(context.Background(), testNS)
	dindOnce.Do(func() {
		if _, _, dindErr = e.ctr(ctx, "images", "import", archive); dindErr != nil {
			return
		}
		dir, err := os.MkdirTemp("", "gvx-golden-")
		if err != nil {
			dindErr = err
			return
		}
		if dindErr = os.Chmod(dir, 0o755); dindErr != nil {
			return
		}
		golden = filepath.Join(dir, "golden.ext4")
		// The CLI, as a user runs it.
		r, err := e.run(ctx, "", filepath.Join(e.gvxBin, "gvx"), "golden", "build", "--address", e.Socket(), "--namespace", testNS,
			"--image", dindImage, "--load", filepath.Join(e.images, "busybox.tar"), "--size", "2G", golden)
		if err == nil && r.code != 0 {
			err = fmt.Errorf("gvx golden build: exit %d: %s", r.code, r.stderr)
		}
		dindErr = err
	})
	if dindErr != nil {
		t.Fatalf("dind setup: %v", dindErr)
	}
	return &dind.Runner{Client: c}, ctx
}

// sbRun executes a shell script inside the sandbox (where the docker CLI
// is) and returns its output; it fails the test on a non-zero exit.
func sbRun(t *testing.T, ctx context.Context, sb *dind.Sandbox, script string) string {
	t.Helper()
	var out, errb bytes.Buffer
	code, err := sb.Exec(ctx, &out, &errb, "sh", "-c", script)
	if err != nil || code != 0 {
		t.Fatalf("in %s: %q: exit %d, %v\nstdout: %s\nstderr: %s", sb.ID, script, code, err, out.String(), errb.String())
	}
	return out.String()
}

func startEpisode(t *testing.T, r *dind.Runner, ctx context.Context, id string) *dind.Episode {
	t.Helper()
	vol := filepath.Join(filepath.Dir(golden), id+".ext4")
	ep, err := r.StartEpisode(ctx, id, dindImage, golden, vol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ep.Close(context.Background(), false); err != nil {
			t.Errorf("close episode %s: %v", id, err)
		}
	})
	return ep
}

const dockerfile = `FROM gvx.test/busybox:latest AS build
RUN echo built-in-stage-one > /built
FROM gvx.test/busybox:latest
COPY --from=build /built /built
COPY hello.txt /hello.txt
RUN cat /built /hello.txt > /both
CMD ["cat", "/both"]
`

const composeFile = `version: "3"
services:
  web:
    image: gvx.test/busybox:latest
    command: sh -c "mkdir -p /www && echo compose-web-ok > /www/index.html && httpd -f -p 80 -h /www"
  client:
    image: gvx.test/busybox:latest
    depends_on: [web]
    command: sh -c "for i in $$(seq 20); do wget -qO- http://web/ && exit 0; sleep 0.25; done; exit 1"
`

// TestDockerEpisode: inside an episode: overlay2, preloaded images run
// without a pull, docker build with RUN, COPY and a multi-stage step, and a
// two-service compose project whose services reach each other by name.
func TestDockerEpisode(t *testing.T) {
	r, ctx := dindEnv(t)
	checkNoLeaks(t)
	ep := startEpisode(t, r, ctx, "dk1")
	t.Logf("clone %s (%s), dockerd ready after %s", ep.Clone, ep.Method, ep.Ready)

	if out := sbRun(t, ctx, ep.Sandbox, "docker info --format '{{.Driver}}'"); strings.TrimSpace(out) != "overlay2" {
		t.Errorf("storage driver %q, want overlay2", out)
	}
	if out := sbRun(t, ctx, ep.Sandbox, "docker run --rm --pull never gvx.test/busybox:latest echo ok"); strings.TrimSpace(out) != "ok" {
		t.Errorf("docker run: %q", out)
	}
	out := sbRun(t, ctx, ep.Sandbox, fmt.Sprintf(`set -e; mkdir -p /b && cd /b
echo hello-ctx > hello.txt
cat > Dockerfile <<'DOCKERFILE'
%sDOCKERFILE
docker build -q -t gvx-test/built . >/dev/null
docker run --rm gvx-test/built`, dockerfile))
	if !strings.Contains(out, "built-in-stage-one") || !strings.Contains(out, "hello-ctx") {
		t.Errorf("docker build result printed %q", out)
	}
	out = sbRun(t, ctx, ep.Sandbox, fmt.Sprintf(`set -e; mkdir -p /c && cd /c
cat > docker-compose.yml <<'COMPOSE'
%sCOMPOSE
docker-compose up --no-color --abort-on-container-exit --exit-code-from client 2>/dev/null
docker-compose down >/dev/null 2>&1`, composeFile))
	if !strings.Contains(out, "compose-web-ok") {
		t.Errorf("compose client did not reach web by name:\n%s", out)
	}
}

// TestDockerHostSocket: the inner dockerd is reachable from the host at
// the documented per-task socket path, even where a killed shim of a task
// with the same id left its socket (nothing listening) behind.
func TestDockerHostSocket(t *testing.T) {
	r, ctx := dindEnv(t)
	checkNoLeaks(t)
	stale := harness.State.DockerSocket(testNS, "dk2")
	if err := os.MkdirAll(filepath.Dir(filepath.Dir(stale)), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Dir(stale), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	t.Cleanup(func() { // after the episode: left only when the create failed
		_ = os.Remove(stale)
		_ = os.Remove(filepath.Dir(stale))
		_ = os.Remove(filepath.Dir(filepath.Dir(stale)))
	})
	if fi, err := os.Lstat(stale); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("the stale socket %s: %v, %v", stale, fi, err)
	}
	ep := startEpisode(t, r, ctx, "dk2")
	want := harness.State.DockerSocket(testNS, "dk2")
	if ep.Docker.Socket != want {
		t.Errorf("socket %s, want %s", ep.Docker.Socket, want)
	}
	imgs, err := dind.NewDocker(want).Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(imgs, " "), "gvx.test/busybox:latest") {
		t.Errorf("images through the host socket: %v, want the preloaded busybox", imgs)
	}
}

// TestDockerCtrNerdctl: an episode volume works when the dind sandbox is
// launched by hand with ctr and with nerdctl.
func TestDockerCtrNerdctl(t *testing.T) {
	_, ctx := dindEnv(t)
	checkNoLeaks(t)
	vol := filepath.Join(filepath.Dir(golden), "byhand.ext4")
	gvx(t, "volume", "clone", golden, vol)
	defer os.Remove(vol)
	check := func(id string) {
		t.Helper()
		sock := harness.State.DockerSocket(testNS, id)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := dind.NewDocker(sock).WaitReady(wctx, nil); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		r, err := e.ctrResult(ctx, "task", "exec", "--exec-id", "chk", id, "sh", "-c",
			"docker info --format '{{.Driver}}' && docker run --rm --pull never gvx.test/busybox:latest echo ok")
		if err != nil || r.code != 0 || !strings.Contains(r.stdout, "overlay2") || !strings.Contains(r.stdout, "ok") {
			t.Errorf("%s: exit %d stdout %q stderr %q", id, r.code, r.stdout, r.stderr)
		}
	}
	cleanupTask(t, "dkctr")
	mustCtr(t, append(append([]string{"run", "-d", "--runtime", runtime, "--annotation", api.AnnotationDocker + "=true"},
		volMount(vol, "/var/lib/docker")...), dindImage, "dkctr")...)
	check("dkctr")
	mustCtr(t, "task", "kill", "-s", "TERM", "dkctr")
	waitStatus(t, "dkctr", "STOPPED")
	mustCtr(t, "task", "rm", "dkctr")
	mustCtr(t, "container", "rm", "dkctr")

	t.Cleanup(func() { nerdctl(t, "rm", "-f", "dknerd") })
	mustNerdctl(t, "run", "-d", "--name", "dknerd", "--runtime", runtime, "--net", "none",
		"--annotation", api.AnnotationDocker+"=true", "-v", vol+":/var/lib/docker", dindImage)
	id := strings.TrimSpace(mustNerdctl(t, "inspect", "--format", "{{.ID}}", "dknerd"))
	check(id)
	mustNerdctl(t, "rm", "-f", "dknerd")
}

// TestDockerPool: a docker-mode task adopts a sandbox from a docker pool
// (a pool whose config has [docker] enabled boots its sandboxes with what
// dockerd needs) and its dockerd works from the episode volume; a plain
// task does not take a docker sandbox.
func TestDockerPool(t *testing.T) {
	_, ctx := dindEnv(t)
	checkNoLeaks(t)
	p := startPoolWith(t, 1, "[docker]\nenabled = true\n")
	vol := filepath.Join(filepath.Dir(golden), "pooled.ext4")
	gvx(t, "volume", "clone", golden, vol)
	defer os.Remove(vol)
	cleanupTask(t, "dkpool")
	mustCtr(t, append(append([]string{"run", "-d", "--runtime", runtime, "--runtime-config-path", p.Config},
		volMount(vol, "/var/lib/docker")...), dindImage, "dkpool")...)
	if harness.Adopted(testNS, "dkpool") == "" {
		t.Fatalf("the docker task did not adopt the docker pool's sandbox; pool log:\n%s", p.Log())
	}
	sock := harness.State.DockerSocket(testNS, "dkpool")
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := dind.NewDocker(sock).WaitReady(wctx, nil); err != nil {
		t.Fatal(err)
	}
	r, err := e.ctrResult(ctx, "task", "exec", "--exec-id", "chk", "dkpool", "sh", "-c",
		"docker info --format '{{.Driver}}' && docker run --rm --pull never gvx.test/busybox:latest echo ok")
	if err != nil || r.code != 0 || !strings.Contains(r.stdout, "overlay2") || !strings.Contains(r.stdout, "ok") {
		t.Errorf("docker in the pool sandbox: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	mustCtr(t, "task", "kill", "-s", "TERM", "dkpool")
	waitStatus(t, "dkpool", "STOPPED")
	mustCtr(t, "task", "rm", "dkpool")
	mustCtr(t, "container", "rm", "dkpool")
	fsckClean(t, vol)

	// A plain task (no docker mode: the config says so only to the pool's
	// tasks through [docker]) is another class.
	cfg := filepath.Join(t.TempDir(), "plain.toml")
	plain := strings.Replace(mustRead(t, p.Config), "[docker]\nenabled = true\n", "", 1)
	if err := os.WriteFile(cfg, []byte(plain), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(ctx, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	cleanupTask(t, "dkplain")
	mustCtr(t, "run", "-d", "--runtime", runtime, "--runtime-config-path", cfg, busybox, "dkplain", "sleep", "60")
	if sb := harness.Adopted(testNS, "dkplain"); sb != "" {
		t.Errorf("a plain task adopted docker pool sandbox %s", sb)
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestDockerBlastRadius: `docker run --privileged` deleting everything it
// can reach, then `rm -rf /` in the sandbox itself, damage one episode
// only: the host, the image, the golden volume and another episode are
// untouched.
func TestDockerBlastRadius(t *testing.T) {
	r, ctx := dindEnv(t)
	checkNoLeaks(t)
	sentinel := filepath.Join(t.TempDir(), "host-sentinel")
	if err := os.WriteFile(sentinel, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	goldenSum := sha(t, golden)
	victim := startEpisode(t, r, ctx, "dkv")
	other := startEpisode(t, r, ctx, "dko")
	sbRun(t, ctx, other.Sandbox, "docker run -d --name keep gvx.test/busybox:latest sleep 600 >/dev/null && echo mine > /var/lib/docker/other-was-here")

	// The sandbox for rm -rf / below runs before the host is snapshotted
	// (its own mounts are the host's then and after).
	cleanupTask(t, "blast-rm")
	mustCtr(t, "run", "-d", "--runtime", runtime, busybox, "blast-rm", "sleep", "600")
	host := snapshotHost(t)

	// CVE-2022-0492 from a privileged inner container: mount a cgroup v1
	// hierarchy, set release_agent and notify_on_release, and empty a
	// cgroup; the host's release_agent files are compared below.
	out := sbRun(t, ctx, victim.Sandbox, "docker run --privileged --rm gvx.test/busybox:latest sh -c "+
		"'mkdir -p /tmp/cg; for c in memory rdma pids cpu; do mount -t cgroup -o $c cgroup /tmp/cg 2>&1 && { echo mounted=$c; break; }; done; "+
		"echo /tmp/payload > /tmp/cg/release_agent 2>&1; echo agent-write=$?; mkdir -p /tmp/cg/x; echo 1 > /tmp/cg/x/notify_on_release 2>&1; echo notify-write=$?; "+
		"echo $$ > /tmp/cg/x/cgroup.procs 2>&1; echo $$ > /tmp/cg/cgroup.procs 2>&1; echo release-tried' 2>&1; true")
	attackRan(t, "release_agent (CVE-2022-0492)", out, "agent-write=", "notify-write=", "release-tried")
	t.Logf("release_agent from a privileged inner container:\n%s", out)

	// A privileged inner container with the sandbox's / mounted wipes it;
	// its own output shows it could write there and removed what it could.
	var wout, errb bytes.Buffer
	_, _ = victim.Exec(ctx, &wout, &errb, "sh", "-c",
		"docker run --privileged --rm -v /:/host gvx.test/busybox:latest sh -c "+
			"'echo before=$(ls -A /host | wc -l); echo pwned > /host/etc/blast && cat /host/etc/blast; "+
			"rm -rf /host/* /host/.[!.]* 2>&1 | tail -3; echo wiped; test -e /host/etc || echo etc-gone; echo after=$(ls -A /host | wc -l)'")
	wipe := wout.String() + errb.String()
	attackRan(t, "privileged wipe", wipe, "pwned", "wiped", "etc-gone")
	var before, after int
	for _, l := range strings.Fields(wipe) {
		fmt.Sscanf(l, "before=%d", &before)
		fmt.Sscanf(l, "after=%d", &after)
	}
	if before < 10 || after >= before {
		t.Errorf("privileged wipe: the sandbox's / had %d entries before and %d after; want it emptied", before, after)
	}
	t.Logf("the privileged wipe left %d of %d entries in the victim's /", after, before)

	// rm -rf / in a sandbox itself (a plain one: the wipe above left the
	// victim nothing to run it with): its shell, in memory, reports the
	// removal, and afterwards there is nothing left to exec.
	rm, _, _ := e.ctr(ctx, "task", "exec", "--exec-id", "rm", "blast-rm", "/bin/busybox", "sh", "-c",
		"cd / && /bin/busybox rm -rf /* 2>&1 | /bin/busybox tail -3; echo rm-rc=$?; test -e /bin/busybox || echo busybox-gone")
	attackRan(t, "rm -rf /", rm, "rm-rc=", "busybox-gone")
	if r, err := e.ctrResult(ctx, "task", "exec", "--exec-id", "after", "blast-rm", "/bin/busybox", "true"); err == nil && r.code == 0 {
		t.Error("rm -rf /: /bin/busybox still runs in the sandbox")
	}
	checkHostUnchanged(t, "blast radius", host)

	if b, err := os.ReadFile(sentinel); err != nil || string(b) != "host" {
		t.Errorf("host file damaged: %q, %v", b, err)
	}
	if got := sha(t, golden); got != goldenSum {
		t.Error("golden volume changed")
	}
	if out := sbRun(t, ctx, other.Sandbox, "cat /var/lib/docker/other-was-here && docker ps --format '{{.Names}}' && docker run --rm --pull never gvx.test/busybox:latest echo still-fine"); !strings.Contains(out, "mine") || !strings.Contains(out, "keep") || !strings.Contains(out, "still-fine") {
		t.Errorf("the other episode was affected:\n%s", out)
	}
	// The image's layers on the host are intact: a new sandbox still runs.
	if out := mustCtr(t, "run", "--rm", "--runtime", runtime, busybox, "after-blast", "echo", "image-intact"); strings.TrimSpace(out) != "image-intact" {
		t.Errorf("busybox image after the blast: %q", out)
	}
}

// TestDockerEightEpisodes: eight episodes from one golden volume at once:
// all work, their disks diverge, the golden volume is unchanged, and
// teardown leaves nothing.
func TestDockerEightEpisodes(t *testing.T) {
	r, ctx := dindEnv(t)
	checkNoLeaks(t)
	goldenSum := sha(t, golden)
	eps := make([]*dind.Episode, 8)
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for i := range eps {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			id := fmt.Sprintf("dk8-%d", i)
			eps[i], errs[i] = r.StartEpisode(ctx, id, dindImage, golden, filepath.Join(filepath.Dir(golden), id+".ext4"))
		}(i)
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, ep := range eps {
			if ep != nil {
				if err := ep.Close(context.Background(), false); err != nil {
					t.Errorf("close %s: %v", ep.ID, err)
				}
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("episode %d: %v", i, err)
		}
	}
	for i, ep := range eps {
		wg.Add(1)
		go func(i int, ep *dind.Episode) {
			defer wg.Done()
			var out, errb bytes.Buffer
			code, err := ep.Exec(ctx, &out, &errb, "sh", "-c",
				fmt.Sprintf("docker run --rm --pull never gvx.test/busybox:latest echo ep-%d > /var/lib/docker/mark && sync && cat /var/lib/docker/mark", i))
			if err != nil || code != 0 || !strings.Contains(out.String(), fmt.Sprintf("ep-%d", i)) {
				errs[i] = fmt.Errorf("episode %d: exit %d %v: %s %s", i, code, err, out.String(), errb.String())
			}
		}(i, ep)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for i, ep := range eps {
		if err := ep.Close(ctx, true); err != nil {
			t.Fatal(err)
		}
		got, ok := readInImage(t, ep.Volume, "/mark")
		if !ok || strings.TrimSpace(got) != fmt.Sprintf("ep-%d", i) {
			t.Errorf("%s: /mark = %q, want ep-%d (disks must diverge)", ep.Volume, got, i)
		}
		if err := os.Remove(ep.Volume); err != nil {
			t.Error(err)
		}
		eps[i] = nil
	}
	if got := sha(t, golden); got != goldenSum {
		t.Error("golden volume changed")
	}
}
