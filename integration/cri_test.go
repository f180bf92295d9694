package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
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
	return newCRIEnvWith(t, "")
}

// newCRIEnvWith is newCRIEnv with more containerd config (runtime
// handlers of the test's own).
func newCRIEnvWith(t *testing.T, extraTOML string) *criEnv {
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
  {"type":"bridge","bridge":%q,"isGateway":true,"isDefaultGateway":true,"ipMasq":false,
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
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.gvxanno]
  runtime_type = %q
  pod_annotations = [%q, %q, %q]
  container_annotations = [%[3]q]
`, filepath.Join(dir, "cni"), api.RuntimeType, api.AnnotationDocker, api.AnnotationNetwork, api.AnnotationNAT)+extraTOML)
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

// runPod starts pod name (its logs in the test's directory) with the runtime
// handler and force-removes it when the test ends; it returns the pod's id
// and its config file.
func (x *criEnv) runPod(t *testing.T, name, handler string) (string, string) {
	t.Helper()
	return x.runPodWith(t, name, handler, nil)
}

// runPodWith is runPod with pod annotations.
func (x *criEnv) runPodWith(t *testing.T, name, handler string, annotations map[string]string) (string, string) {
	t.Helper()
	return x.runPodLinux(t, name, handler, annotations, map[string]any{})
}

// runPodLinux is runPodWith with the pod config's linux section
// (cgroup_parent, security_context, …).
func (x *criEnv) runPodLinux(t *testing.T, name, handler string, annotations map[string]string, linux map[string]any) (string, string) {
	t.Helper()
	cfg := x.writeJSON(t, name+".json", map[string]any{
		"metadata":      map[string]string{"name": name, "namespace": "default", "uid": "uid-" + name},
		"hostname":      name, // as the kubelet gives a pod
		"log_directory": filepath.Join(x.dir, "logs-"+name),
		"linux":         linux,
		"annotations":   annotations,
	})
	pod := x.must(t, "runp", "--runtime", handler, cfg)
	t.Cleanup(func() { x.run(t, "rmp", "-f", pod) })
	return pod, cfg
}

// createContainer creates (does not start) container name in pod: busybox
// running command, with extra container config fields (log_path, mounts,
// annotations, …). It returns the container's id.
func (x *criEnv) createContainer(t *testing.T, pod, podCfg, name string, command []string, extra map[string]any) string {
	t.Helper()
	cfg := map[string]any{
		"metadata": map[string]string{"name": name},
		"image":    map[string]string{"image": "gvx.test/busybox:latest"},
		"command":  command,
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return x.must(t, "create", pod, x.writeJSON(t, name+".json", cfg), podCfg)
}

// waitExited waits until container id has exited and returns
// "CONTAINER_EXITED <exit code>" (or its last state).
func (x *criEnv) waitExited(t *testing.T, id string) string {
	t.Helper()
	var st string
	for i := 0; i < 200 && !strings.HasPrefix(st, "CONTAINER_EXITED"); i++ {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		st = x.must(t, "inspect", "--output", "go-template", "--template", "{{.status.state}} {{.status.exitCode}}", id)
	}
	return st
}

// stopRemovePod stops pod, waits until CRI reports it NOTREADY and removes
// it. containerd can answer a RemovePodSandbox right after a successful
// StopPodSandbox with "is running, please stop it first" while the
// sandbox's exit is still on its way (seen once when the pod's Sentry had
// been killed); the kubelet retries then, and so does this.
func (x *criEnv) stopRemovePod(t *testing.T, pod string) {
	t.Helper()
	x.must(t, "stopp", pod)
	var st string
	for i := 0; i < 100; i++ {
		if st = x.must(t, "inspectp", "--output", "go-template", "--template", "{{.status.state}}", pod); st == "SANDBOX_NOTREADY" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var r result
	for i := 0; i < 50; i++ {
		if r = x.run(t, "rmp", pod); r.code == 0 || !strings.Contains(r.stderr, "please stop it first") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.code != 0 {
		t.Fatalf("crictl rmp %s (state %s after stopp): exit %d: %s", pod, st, r.code, r.stderr)
	}
}

// podAddr picks the pod network's address out of `ip -4 -o addr show`.
func podAddr(out string) string {
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, "10.77.0.") {
			return f
		}
	}
	return ""
}

// TestCRIPod: a Kubernetes-style pod through CRI (crictl, runtime handler
// gvx) is one gVisor sandbox on the pod's network (an address from the
// pod's CNI network); its application containers run inside it, share its
// network (one reaches the other on localhost), and logs, exec, stop and
// exit codes work for each; removing the pod leaves nothing behind.
func TestCRIPod(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	pod, podCfg := x.runPod(t, "p1", "gvx")
	app := x.createContainer(t, pod, podCfg, "app", []string{"sh", "-c", "echo app-started; uname -r; ip -4 -o addr show; sleep 600"},
		map[string]any{"log_path": "app.log"})
	x.must(t, "start", app)

	var logs string
	// The last line the app writes before it sleeps is its pod address.
	for i := 0; i < 100 && !strings.Contains(logs, "10.77.0."); i++ {
		time.Sleep(50 * time.Millisecond)
		logs = x.run(t, "logs", app).stdout
	}
	if !strings.Contains(logs, "app-started") || !strings.Contains(logs, "gvisor") {
		t.Errorf("app logs %q: want app-started and gVisor's kernel", logs)
	}
	if !strings.Contains(logs, "10.77.0.") {
		t.Errorf("app logs %q: want an address of the pod network 10.77.0.0/24", logs)
	}
	if out := x.must(t, "exec", app, "sh", "-c", "echo exec-in-pod; hostname"); out != "exec-in-pod\np1" {
		t.Errorf("crictl exec: %q, want exec-in-pod and the pod's hostname p1", out)
	}

	// A second container of the pod: the same sandbox, so the first one's
	// listener on the pod's loopback answers it.
	x.must(t, "exec", app, "sh", "-c", "(echo from-app | nc -l -p 9000 >/dev/null 2>&1 &) ; true")
	// It asks for an OOM score (as the kubelet does for a BestEffort
	// container): the sandbox's host process takes the lowest its
	// containers ask for, and goes back once that container is deleted.
	sbPid := podSandboxPid(t, pod)
	before := oomScoreAdj(t, sbPid)
	secondID := x.createContainer(t, pod, podCfg, "second",
		[]string{"sh", "-c", "ip -4 -o addr show; for i in 1 2 3 4 5 6 7 8 9 10; do nc 127.0.0.1 9000 && break; sleep 0.2; done; echo second-done; exit 5"},
		map[string]any{"log_path": "second.log", "linux": map[string]any{"resources": map[string]any{"oom_score_adj": 777}}})
	x.must(t, "start", secondID)
	if got := oomScoreAdj(t, sbPid); got != 777 {
		t.Errorf("pod sandbox's oom_score_adj with the second container: %d, want its 777", got)
	}
	if st := x.waitExited(t, secondID); st != "CONTAINER_EXITED 5" {
		t.Errorf("second container: %q, want CONTAINER_EXITED 5", st)
	}
	slogs := x.run(t, "logs", secondID).stdout
	if !strings.Contains(slogs, "from-app") || !strings.Contains(slogs, "second-done") {
		t.Errorf("second container logs %q: want the first container's answer over localhost, then second-done", slogs)
	}
	if addr := podAddr(logs); addr == "" || podAddr(slogs) != addr {
		t.Errorf("pod addresses: app %q, second %q: want the same pod address", podAddr(logs), podAddr(slogs))
	}
	x.must(t, "rm", secondID)
	if got := oomScoreAdj(t, sbPid); got != before {
		t.Errorf("pod sandbox's oom_score_adj after the second container's removal: %d, want %d again", got, before)
	}

	x.must(t, "stop", "--timeout", "1", app)
	insp := x.must(t, "inspect", "--output", "go-template", "--template", "{{.status.state}} {{.status.exitCode}}", app)
	if !strings.HasPrefix(insp, "CONTAINER_EXITED") {
		t.Errorf("after stop: %q, want CONTAINER_EXITED", insp)
	}
	x.must(t, "rm", app)
	x.must(t, "stopp", pod)
	x.must(t, "rmp", pod)
}

// podSandboxPid is the host pid of CRI pod id's sandbox (gVisor's state
// of its root container, in the pod's sentry root).
func podSandboxPid(t *testing.T, id string) int {
	t.Helper()
	data, err := os.ReadFile(api.SentryRoot(filepath.Join(harness.State.SentryRoot(id), "k8s.io")).SandboxState(id))
	if err != nil {
		t.Fatalf("pod %s: %v", id, err)
	}
	var st struct {
		Sandbox struct {
			Pid int `json:"pid"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal(data, &st); err != nil || st.Sandbox.Pid <= 0 {
		t.Fatalf("pod %s's state: pid %d, %v", id, st.Sandbox.Pid, err)
	}
	return st.Sandbox.Pid
}

// oomScoreAdj is process pid's oom_score_adj.
func oomScoreAdj(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCRIPodKillShim: kill -9 of a pod's shim while its containers run;
// containerd's cleanup of each container and of the pod takes the whole
// sandbox down and leaves nothing behind.
func TestCRIPodKillShim(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	pod, podCfg := x.runPod(t, "p2", "gvx")
	var apps []string
	for _, name := range []string{"a", "b"} {
		id := x.createContainer(t, pod, podCfg, name, []string{"sleep", "600"}, nil)
		x.must(t, "start", id)
		apps = append(apps, id)
	}
	shim := shimPidAt(t, x.ctrd.Socket(), pod)
	procs := harness.Descendants(shim)
	if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, id := range apps {
		deadline := time.Now().Add(20 * time.Second)
		for !strings.HasPrefix(x.must(t, "inspect", "--output", "go-template", "--template", "{{.status.state}}", id), "CONTAINER_EXITED") {
			if time.Now().After(deadline) {
				t.Fatalf("container %s still running after its shim died", id)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	x.must(t, "rmp", "-f", pod)
	for _, pid := range procs {
		if p, err := readProc(pid); err == nil && p.state != "Z" {
			t.Errorf("pod process %d (%s) survived its shim", pid, p.name)
		}
	}
}

// TestCRIPodVolume: an ext4lite volume given to a pod's container as a
// hostPath file is mounted inside the pod's sandbox (not on the host), the
// container's writes land in the image, and removing the pod leaves the
// image clean and unleased.
func TestCRIPodVolume(t *testing.T) {
	x := newCRIEnv(t)
	dir := volumeDir(t)
	checkNoLeaks(t)
	img := filepath.Join(dir, "pod.ext4")
	gvx(t, "volume", "create", "--size", "32M", img)
	pod, podCfg := x.runPod(t, "p3", "gvx")
	id := x.createContainer(t, pod, podCfg, "vol", []string{"sh", "-c", "echo from-pod > /data/f && sync && grep ' /data ' /proc/mounts"},
		map[string]any{"mounts": []map[string]any{{"container_path": "/data", "host_path": img}}, "log_path": "vol.log"})
	x.must(t, "start", id)
	if st := x.waitExited(t, id); st != "CONTAINER_EXITED 0" {
		t.Errorf("volume container: %q (logs %q), want CONTAINER_EXITED 0", st, x.run(t, "logs", id).stdout+x.run(t, "logs", id).stderr)
	}
	for _, m := range harness.MountsUnder("/") {
		if strings.Contains(m, "pod.ext4") || strings.HasPrefix(m, harness.State.VolumesDir()) {
			t.Errorf("volume mounted on the host at %s", m)
		}
	}
	x.must(t, "rm", id)
	x.must(t, "stopp", pod)
	x.must(t, "rmp", pod)
	if got, ok := readInImage(t, img, "/f"); !ok || strings.TrimSpace(got) != "from-pod" {
		t.Errorf("file written in the pod: %q (exists %v)", got, ok)
	}
	fsckClean(t, img)
}

// TestCRIPodDockerMixed: docker mode is a property of the pod's sandbox; a
// container asking for it in a pod that runs without it is refused with an
// error that says how to ask for it.
func TestCRIPodDockerMixed(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	pod, podCfg := x.runPod(t, "p4", "gvxanno")
	id := x.createContainer(t, pod, podCfg, "dockerapp", []string{"true"},
		map[string]any{"annotations": map[string]string{api.AnnotationDocker: "true"}})
	r := x.run(t, "start", id)
	if r.code == 0 || !strings.Contains(r.stderr, "docker mode applies to the whole pod") || !strings.Contains(r.stderr, "pod annotation") {
		t.Errorf("docker container in a pod without docker mode: exit %d %q, want a clear refusal", r.code, r.stderr)
	}
	x.must(t, "rm", id)
	x.must(t, "stopp", pod)
	x.must(t, "rmp", pod)
}

// TestCRIPodKillSandbox: kill -9 of a pod's sandbox (its Sentry) while its
// container runs: the container exits, and removing it and the pod works
// and leaves nothing behind.
func TestCRIPodKillSandbox(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	pod, podCfg := x.runPod(t, "p5", "gvx")
	id := x.createContainer(t, pod, podCfg, "sleeper", []string{"sleep", "600"}, nil)
	x.must(t, "start", id)
	sentry := 0
	for _, pid := range harness.Descendants(shimPidAt(t, x.ctrd.Socket(), pod)) {
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.HasPrefix(string(cmd), "runsc-sandbox\x00") {
			sentry = pid
		}
	}
	if sentry == 0 {
		t.Fatal("no Sentry process below the pod's shim")
	}
	if err := syscall.Kill(sentry, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if st := x.waitExited(t, id); !strings.HasPrefix(st, "CONTAINER_EXITED") {
		t.Fatalf("container after its sandbox was killed: %q", st)
	}
	x.must(t, "rm", id)
	x.stopRemovePod(t, pod)
}
