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
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/deploy"
	"github.com/gvxrun/gvx/deploy/installer"
	"github.com/gvxrun/gvx/integration/harness"
)

const installBridge = "gvxinst0"

// installNode is a node under a temporary root: its containerd config
// (the script's target) below node/, containerd's own root, state and
// sockets beside it, and a restart script standing for systemctl.
type installNode struct {
	dir, node, crictl string
}

func (n *installNode) sock() string { return filepath.Join(n.dir, "c.sock") }

// restart runs the node's restart script (stop, start, wait for the
// socket and for CRI to answer).
func (n *installNode) restart(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(filepath.Join(n.dir, "restart.sh")).CombinedOutput(); err != nil {
		t.Fatalf("restart containerd: %v: %s", err, out)
	}
	n.waitCRI(t)
}

func (n *installNode) waitCRI(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := n.crictlRun(t, "info")
		if r.code == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd's CRI did not answer: %s (log %s)", r.stderr, filepath.Join(n.dir, "containerd.log"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (n *installNode) crictlRun(t *testing.T, args ...string) result {
	t.Helper()
	full := append([]string{"--runtime-endpoint", "unix://" + n.sock(), "--image-endpoint", "unix://" + n.sock(), "--timeout", "60s"}, args...)
	r, err := e.run(context.Background(), "", n.crictl, full...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (n *installNode) crictlMust(t *testing.T, args ...string) string {
	t.Helper()
	r := n.crictlRun(t, args...)
	if r.code != 0 {
		t.Fatalf("crictl %s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return strings.TrimSpace(r.stdout)
}

func (n *installNode) ctr(t *testing.T, args ...string) string {
	t.Helper()
	full := append([]string{"--address", n.sock(), "--namespace", "k8s.io"}, args...)
	r, err := e.run(context.Background(), "", filepath.Join(e.ctrdBin, "ctr"), full...)
	if err != nil || r.code != 0 {
		t.Fatalf("ctr %s: %v exit %d: %s%s", strings.Join(args, " "), err, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func (n *installNode) writeJSON(t *testing.T, name string, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(n.dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeFile(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// newInstallNode writes the node's containerd config — no gvx in it; the
// CRI settings in a file it imports, as many nodes keep them — and starts
// its containerd.
func newInstallNode(t *testing.T) *installNode {
	t.Helper()
	crictlBin := os.Getenv("CRICTL_BIN")
	if crictlBin == "" {
		t.Skip("CRICTL_BIN not set (make integration builds crictl)")
	}
	dir, err := os.MkdirTemp("/run", "gvxinst-")
	if err != nil {
		t.Fatal(err)
	}
	// gvx's sandboxes run as uid 100000 and exec the installed binaries.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	n := &installNode{dir: dir, node: filepath.Join(dir, "node"), crictl: filepath.Join(crictlBin, "crictl")}
	cgroups := topCgroupDirs()
	t.Cleanup(func() { n.close(t, cgroups) })
	nodeCfg := fmt.Sprintf(`# the node's containerd (no gvx)
version = 3
root = "%[1]s/root"
state = "%[1]s/state"
imports = ["%[2]s/etc/containerd/conf.d/10-cri.toml"]
[grpc]
  address = "%[1]s/c.sock"
[ttrpc]
  address = "%[1]s/c.sock.ttrpc"
`, dir, n.node)
	writeFile(t, filepath.Join(n.node, "etc/containerd/config.toml"), nodeCfg, 0o600)
	writeFile(t, filepath.Join(n.node, "etc/containerd/conf.d/10-cri.toml"), fmt.Sprintf(`version = 3
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "gvx.test/pause:latest"
[plugins."io.containerd.cri.v1.runtime"]
  # (hosts that refuse negative OOM score adjustments, as these do)
  restrict_oom_score_adj = true
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "%s/cni"
`, dir), 0o644)
	if err := os.MkdirAll(filepath.Join(n.node, "opt"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "cni", "10-gvxinst.conflist"), fmt.Sprintf(`{"cniVersion":"1.0.0","name":"gvxinst","plugins":[
  {"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":false,
   "ipam":{"type":"host-local","ranges":[[{"subnet":"10.78.0.0/24"}]],"dataDir":%q}},
  {"type":"loopback"}]}`, installBridge, filepath.Join(dir, "ipam")), 0o644)
	// systemctl restart containerd, for this node: SIGTERM, wait, start.
	restart := fmt.Sprintf(`#!/bin/sh
d=%[1]s
if [ -f $d/containerd.pid ]; then
	pid=$(cat $d/containerd.pid)
	kill -TERM $pid 2>/dev/null
	i=0
	while kill -0 $pid 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
	kill -0 $pid 2>/dev/null && kill -KILL $pid
	rm -f $d/containerd.pid
fi
[ "${1:-}" = stop ] && exit 0
rm -f $d/c.sock $d/c.sock.ttrpc
PATH=%[2]s:$PATH setsid %[2]s/containerd --config %[3]s/etc/containerd/config.toml >>$d/containerd.log 2>&1 </dev/null &
echo $! >$d/containerd.pid
i=0
while [ ! -S $d/c.sock ]; do
	sleep 0.1; i=$((i+1))
	[ $i -lt 300 ] || { echo "containerd did not start: see $d/containerd.log" >&2; exit 1; }
done
`, dir, e.ctrdBin, n.node)
	writeFile(t, filepath.Join(dir, "restart.sh"), restart, 0o755)
	return n
}

// close stops the node's containerd after removing what a failed test
// left, and releases its directory, bridge and namespace cgroups.
func (n *installNode) close(t *testing.T, cgroups map[string]bool) {
	if _, err := os.Stat(n.sock()); err == nil {
		_ = n.crictlRun(t, "rmp", "-af")
	}
	_ = exec.Command(filepath.Join(n.dir, "restart.sh"), "stop").Run()
	for _, m := range harness.MountsUnder(n.dir + "/") {
		_ = exec.Command("umount", "-l", m).Run()
	}
	_ = os.RemoveAll(n.dir)
	_ = exec.Command("ip", "link", "del", installBridge).Run()
	for d := range topCgroupDirs() {
		if !cgroups[d] {
			_ = os.Remove(d)
		}
	}
}

func topCgroupDirs() map[string]bool {
	out := map[string]bool{}
	for _, pattern := range []string{"/sys/fs/cgroup/*/*", "/sys/fs/cgroup/*"} {
		dirs, _ := filepath.Glob(pattern)
		for _, d := range dirs {
			if st, err := os.Lstat(d); err == nil && st.IsDir() {
				out[d] = true
			}
		}
	}
	return out
}

// podMemory is what a pod's sandbox costs the host: the PSS, USS and RSS
// of its host processes (the shim and everything below it), and the
// memory its pod cgroup is charged.
type podMemory struct {
	pss, uss, rss, cgroup int64
	procs                 int
}

func (m podMemory) String() string {
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	return fmt.Sprintf("PSS %.1f MiB, USS %.1f MiB, RSS %.1f MiB (%d processes); pod cgroup %.1f MiB",
		mib(m.pss), mib(m.uss), mib(m.rss), m.procs, mib(m.cgroup))
}

func measurePod(t *testing.T, shim int) podMemory {
	t.Helper()
	var m podMemory
	for _, pid := range append([]int{shim}, harness.Descendants(shim)...) {
		uss, pss, ok := harness.Smaps(pid)
		if !ok {
			continue
		}
		m.procs++
		m.uss += uss
		m.pss += pss
		m.rss += rollupField(pid, "Rss:")
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(cmd), "runsc-sandbox\x00") {
			m.cgroup = memCgroupUsage(pid)
		}
	}
	return m
}

func rollupField(pid int, name string) int64 {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == name {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v * 1024
		}
	}
	return 0
}

// memCgroupUsage is the memory charged to pid's cgroup (v1 memory
// controller, or the unified hierarchy's memory.current).
func memCgroupUsage(pid int) int64 {
	memory, unified := procCgroups(pid)
	var files []string
	if memory != "" {
		files = append(files, filepath.Join("/sys/fs/cgroup/memory", memory, "memory.usage_in_bytes"))
	}
	if unified != "" {
		files = append(files, filepath.Join("/sys/fs/cgroup/unified", unified, "memory.current"))
	}
	for _, p := range files {
		if v, err := os.ReadFile(p); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
			if n > 0 {
				return n
			}
		}
	}
	return 0
}

// procCgroups reads /proc/PID/cgroup: pid's cgroup on the v1 memory
// controller and on the unified hierarchy ("" where it has none).
func procCgroups(pid int) (memory, unified string) {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case strings.Contains(","+f[1]+",", ",memory,"):
			memory = f[2]
		case f[1] == "":
			unified = f[2]
		}
	}
	return memory, unified
}

// TestInstallerNode: the node installer on a node's containerd. The
// script installs gvx into a node tree whose containerd has never heard of
// gvx (its config imports a file of its own) and restarts containerd
// through its restart hook; a CRI pod with runtime handler gvx then runs
// a container on the pod network from the installed binaries, and its
// sandbox's memory stays within the RuntimeClass's declared overhead. The
// installer image (hack/mkimage-installer.sh), in a CRI pod of the node's
// default runtime (runc) as the kubelet runs the DaemonSet's (privileged,
// the node's pid namespace, the node's /etc and /opt mounted), uninstalls; after a restart the handler is
// gone and the node's files are exactly as before.
func TestInstallerNode(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	n := newInstallNode(t)
	before, err := installer.ReadTree(n.node)
	if err != nil {
		t.Fatal(err)
	}
	n.restart(t)
	for _, img := range []string{"busybox.tar", "pause.tar"} {
		r, err := e.run(context.Background(), "", filepath.Join(e.ctrdBin, "ctr"), "--address", n.sock(), "--namespace", "k8s.io",
			"images", "import", filepath.Join(e.images, img))
		if err != nil || r.code != 0 {
			t.Fatalf("import %s: %v %s", img, err, r.stderr)
		}
	}
	podCfg := n.writeJSON(t, "pod.json", map[string]any{
		"metadata":      map[string]string{"name": "inst", "namespace": "default", "uid": "uid-inst"},
		"log_directory": filepath.Join(n.dir, "logs"),
		"linux":         map[string]any{},
	})
	if r := n.crictlRun(t, "runp", "--runtime", "gvx", podCfg); r.code == 0 || !strings.Contains(r.stderr, "gvx") {
		t.Fatalf("runp --runtime gvx before install: exit %d %s, want no such handler", r.code, r.stderr)
	}

	script := filepath.Join("..", "deploy", "installer", "install.sh")
	env := []string{"HOST_ROOT=" + n.node, "NODE_ROOT=" + n.node, "GVX_SRC=" + e.gvxBin,
		"RESTART=command", "RESTART_CMD=" + filepath.Join(n.dir, "restart.sh")}
	cmd := exec.Command("/bin/sh", script, "install")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "restarting containerd") {
		t.Fatalf("install: %v\n%s", err, out)
	}
	t.Logf("install:\n%s", out)
	n.waitCRI(t)

	pod := n.crictlMust(t, "runp", "--runtime", "gvx", podCfg)
	shim := shimPidAt(t, n.sock(), pod)
	// The server is gvx-shim, which the installed containerd-shim-gvx-v2
	// started (its argv[0]).
	installed := filepath.Join(n.node, "opt/gvx/bin", api.ShimServerBinary)
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", shim)); exe != installed {
		t.Errorf("the pod's shim runs %s, want the installed %s", exe, installed)
	}
	if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", shim)); !strings.HasPrefix(string(cmdline), filepath.Join(n.node, "opt/gvx/bin", api.ShimBinary)+"\x00") {
		t.Errorf("the pod's shim was started as %q, want by the installed %s", cmdline, api.ShimBinary)
	}
	time.Sleep(2 * time.Second)
	sandboxOnly := measurePod(t, shim)

	ctrCfg := n.writeJSON(t, "app.json", map[string]any{
		"metadata": map[string]string{"name": "app"},
		"image":    map[string]string{"image": busybox},
		"command":  []string{"sh", "-c", "echo installed-ok; uname -r; ip -4 -o addr show; sleep 600"},
		"log_path": "app.log",
	})
	app := n.crictlMust(t, "create", pod, ctrCfg, podCfg)
	n.crictlMust(t, "start", app)
	var logs string
	for i := 0; i < 100 && !strings.Contains(logs, "10.78.0."); i++ {
		time.Sleep(50 * time.Millisecond)
		logs = n.crictlRun(t, "logs", app).stdout
	}
	if !strings.Contains(logs, "installed-ok") || !strings.Contains(logs, "gvisor") || !strings.Contains(logs, "10.78.0.") {
		t.Errorf("container logs %q: want its output, gVisor's kernel and an address of the node's pod network", logs)
	}
	if got := n.crictlMust(t, "exec", app, "echo", "exec-ok"); got != "exec-ok" {
		t.Errorf("crictl exec: %q", got)
	}
	time.Sleep(2 * time.Second)
	withApp := measurePod(t, shim)
	t.Logf("idle pod sandbox: %s", sandboxOnly)
	t.Logf("idle pod with one sleeping container: %s", withApp)
	overhead, err := deploy.RuntimeClassOverhead()
	if err != nil {
		t.Fatal(err)
	}
	if withApp.pss > overhead || withApp.cgroup > overhead {
		t.Errorf("an idle gvx pod costs %s: more than the RuntimeClass's overhead.podFixed.memory %d MiB (deploy/base/runtimeclass.yaml)", withApp, overhead>>20)
	}
	n.crictlMust(t, "stop", "--timeout", "1", app)
	n.crictlMust(t, "rm", app)
	n.crictlMust(t, "stopp", pod)
	n.crictlMust(t, "rmp", pod)
	installPool(t, n, script, env, podCfg)

	// Uninstall from the installer image, in a pod as the kubelet runs
	// the DaemonSet's: runc (the node's default handler), privileged, the
	// node's pid namespace, the node's /etc and /opt at /host.
	img := filepath.Join(n.dir, "gvx-installer.tar")
	if out, err := exec.Command(filepath.Join("..", "hack", "mkimage-installer.sh"), img, "gvx.test/gvx-installer:latest", e.gvxBin).CombinedOutput(); err != nil {
		t.Fatalf("mkimage-installer: %v\n%s", err, out)
	}
	n.ctr(t, "images", "import", img)
	const nodePID = 2 // CRI NamespaceMode NODE: hostPID
	privileged := map[string]any{"privileged": true, "namespace_options": map[string]any{"pid": nodePID}}
	instPod := n.writeJSON(t, "installer-pod.json", map[string]any{
		"metadata":      map[string]string{"name": "gvx-node", "namespace": "gvx-system", "uid": "uid-gvx-node"},
		"log_directory": filepath.Join(n.dir, "logs-installer"),
		"linux":         map[string]any{"security_context": privileged},
	})
	instCtr := n.writeJSON(t, "installer.json", map[string]any{
		"metadata": map[string]string{"name": "uninstall"},
		"image":    map[string]string{"image": "gvx.test/gvx-installer:latest"},
		"command":  []string{"/gvx/install.sh", "uninstall"},
		"envs": []map[string]string{{"key": "HOST_ROOT", "value": "/host"}, {"key": "NODE_ROOT", "value": n.node},
			{"key": "RESTART", "value": "none"}},
		"mounts": []map[string]any{{"container_path": "/host/etc", "host_path": filepath.Join(n.node, "etc")},
			{"container_path": "/host/opt", "host_path": filepath.Join(n.node, "opt")}},
		"log_path": "uninstall.log",
		"linux":    map[string]any{"security_context": privileged},
	})
	ipod := n.crictlMust(t, "runp", instPod)
	ictr := n.crictlMust(t, "create", ipod, instCtr, instPod)
	n.crictlMust(t, "start", ictr)
	st := ""
	for i := 0; i < 300 && !strings.HasPrefix(st, "CONTAINER_EXITED"); i++ {
		time.Sleep(100 * time.Millisecond)
		st = n.crictlMust(t, "inspect", "--output", "go-template", "--template", "{{.status.state}} {{.status.exitCode}}", ictr)
	}
	ulog := n.crictlRun(t, "logs", ictr)
	if st != "CONTAINER_EXITED 0" || !strings.Contains(ulog.stdout, "uninstalled") {
		t.Errorf("uninstall from the image: %s\n%s%s", st, ulog.stdout, ulog.stderr)
	}
	t.Logf("uninstall (installer image, runc pod):\n%s", ulog.stdout)
	n.crictlMust(t, "rm", ictr)
	n.crictlMust(t, "stopp", ipod)
	n.crictlMust(t, "rmp", ipod)
	n.crictlMust(t, "rmi", "gvx.test/gvx-installer:latest")
	n.restart(t)
	if r := n.crictlRun(t, "runp", "--runtime", "gvx", podCfg); r.code == 0 {
		t.Errorf("runp --runtime gvx after uninstall worked, want no such handler")
		n.crictlRun(t, "rmp", "-f", strings.TrimSpace(r.stdout))
	}
	_ = exec.Command(filepath.Join(n.dir, "restart.sh"), "stop").Run()

	after, err := installer.ReadTree(n.node)
	if err != nil {
		t.Fatal(err)
	}
	if d := before.Diff(after); len(d) > 0 {
		t.Errorf("the node's files after install → pod → uninstall:\n  %s", strings.Join(d, "\n  "))
	}
}

// installPool: installed again with a gvx config that has a [pool], the
// installer writes the pool server's systemd unit (and, with
// RESTART=command, says to start it; containerd needs no restart). Its
// ExecStart, run as systemd would (this machine has no systemd), runs
// the installed gvx on the installed config, and a gvx pod adopts one
// of its sandboxes. Uninstall refuses while the server runs, naming it.
func installPool(t *testing.T, n *installNode, script string, env []string, podCfg string) {
	t.Helper()
	poolCfg := filepath.Join(n.dir, "gvx-pool.toml")
	writeFile(t, poolCfg, fmt.Sprintf("[pool]\nsize = 1\nsocket = %q\n", filepath.Join(n.dir, "pool.sock")), 0o644)
	cmd := exec.Command("/bin/sh", script, "install")
	cmd.Env = append(append(os.Environ(), env...), "GVX_CONFIG_SRC="+poolCfg)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "restarting containerd") || !strings.Contains(string(out), "start it yourself") {
		t.Fatalf("install with a pool: %v\n%s\nwant the pool unit written, its start left to the operator, no containerd restart", err, out)
	}
	t.Logf("install with a pool:\n%s", out)
	unitPath := filepath.Join(n.node, "etc/systemd/system/gvx-pool.service")
	unit, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatalf("the pool server's unit: %v", err)
	}
	var argv []string
	for _, l := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			argv = strings.Fields(v)
		}
	}
	gvxBin := filepath.Join(n.node, "opt/gvx/bin", api.CLIBinary)
	cfg := filepath.Join(n.node, "etc/gvx/config.toml")
	if want := []string{gvxBin, "pool", "serve", "--config", cfg}; strings.Join(argv, " ") != strings.Join(want, " ") {
		t.Fatalf("the pool unit's ExecStart %q, want %q:\n%s", argv, want, unit)
	}
	if sa, err := exec.LookPath("systemd-analyze"); err == nil {
		if out, err := exec.Command(sa, "verify", unitPath).CombinedOutput(); err != nil {
			t.Errorf("systemd-analyze verify %s: %v\n%s", unitPath, err, out)
		}
	}
	p, err := harness.ServePool(context.Background(), filepath.Dir(argv[0]), argv[4], 1)
	p = stopAtCleanup(t, p, err)

	pod := n.crictlMust(t, "runp", "--runtime", "gvx", podCfg)
	if sb := harness.Adopted("k8s.io", pod); sb == "" {
		t.Errorf("pod %s booted its own sandbox, want one of the installed pool server's; its log:\n%s", pod, p.Log())
	}
	ctrCfg := n.writeJSON(t, "pooled.json", map[string]any{
		"metadata": map[string]string{"name": "pooled"},
		"image":    map[string]string{"image": busybox},
		"command":  []string{"sleep", "600"},
		"log_path": "pooled.log",
	})
	app := n.crictlMust(t, "create", pod, ctrCfg, podCfg)
	n.crictlMust(t, "start", app)
	if got := n.crictlMust(t, "exec", app, "sh", "-c", "echo pooled-ok; uname -r"); !strings.Contains(got, "pooled-ok") || !strings.Contains(got, "gvisor") {
		t.Errorf("crictl exec in the pooled pod: %q", got)
	}
	n.crictlMust(t, "stop", "--timeout", "1", app)
	n.crictlMust(t, "rm", app)
	n.crictlMust(t, "stopp", pod)
	n.crictlMust(t, "rmp", pod)

	cmd = exec.Command("/bin/sh", script, "uninstall")
	cmd.Env = append(os.Environ(), env...)
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "a pool server") || !strings.Contains(string(out), strconv.Itoa(p.Pid())) {
		t.Errorf("uninstall while the pool server runs: %v\n%s\nwant a refusal naming its pid %d", err, out, p.Pid())
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
}
