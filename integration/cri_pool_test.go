package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
)

// criPoolHandler is the containerd config of CRI runtime handler name
// whose gvx config is cfg (a pool's).
func criPoolHandler(name, cfg string) string {
	return fmt.Sprintf(`
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%[1]s]
  runtime_type = %[2]q
  pod_annotations = [%[3]q]
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%[1]s.options]
  ConfigPath = %[4]q
`, name, api.RuntimeType, api.AnnotationNetwork, cfg)
}

// podNetns is the network namespace containerd made for pod (its CNI
// network's).
func (x *criEnv) podNetns(t *testing.T, pod string) string {
	t.Helper()
	return x.must(t, "inspectp", "--output", "go-template", "--template",
		`{{range .info.runtimeSpec.linux.namespaces}}{{if eq .type "network"}}{{.path}}{{end}}{{end}}`, pod)
}

// shimSaid is what the shims logged about task id (containerd's log
// lines that name it and contain what).
func (x *criEnv) shimSaid(id, what string) string {
	data, _ := os.ReadFile(filepath.Join(x.ctrd.Dir, "containerd.log"))
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, id) && strings.Contains(l, what) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// TestCRIPodPool: a CRI pod whose runtime handler has a warm pool adopts a
// pool sandbox for its sandbox container, and the pod's interfaces are
// attached to the running sandbox: the guest has the pod's CNI address
// and default route, the host side of the pod's interface no longer has
// the address, a server in the pod answers the host on the pod's IP and
// the pod reaches a server the test runs on the pod network's gateway;
// the pod's containers run in the adopted sandbox, exec works, and
// removing the pod destroys the sandbox (a pod's sandbox is not reset
// into the pool) and leaves nothing behind.
func TestCRIPodPool(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	p := startPoolWith(t, 1, "")
	x := newCRIEnvWith(t, criPoolHandler("gvxpool", p.Config))
	// The pod's cgroup, as the kubelet makes one (cgroupfs driver).
	podParent := fmt.Sprintf("/gvxtest-kubepods-%d/pod-uid-pp1", os.Getpid())
	parentDirs := makeCgroup(t, podParent)
	pod, podCfg := x.runPodLinux(t, "pp1", "gvxpool", nil, map[string]any{"cgroup_parent": podParent})
	sb := harness.Adopted("k8s.io", pod)
	if sb == "" {
		t.Fatalf("pod %s booted its own sandbox (%s); pool log:\n%s", pod, x.shimSaid(pod, "boots its own sandbox"), p.Log())
	}
	// Its sandbox container runs as the pool's gvx-pause, a process in
	// the sandbox's root container (sentry/exectask), not as a container
	// of its own (no gofer, no gVisor create of the pause image).
	if _, err := os.Stat(harness.SandboxDir(sb).Root().TaskRecord(pod)); err != nil {
		t.Errorf("the pod's sandbox container is no process in pool sandbox %s: %v", sb, err)
	}
	// The adopted sandbox left its pool cgroup for the pod's, so the
	// pod's limits bind it.
	sentry, err := harness.SandboxPid(sb)
	if err != nil {
		t.Fatal(err)
	}
	want := path.Join(podParent, pod)
	if got := memoryCgroup(sentry); got != want {
		t.Errorf("the pooled pod's Sentry (pid %d) is in memory cgroup %q, want the pod's %s", sentry, got, want)
	}
	if left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", api.PoolCgroupParent, sb)); len(left) > 0 {
		t.Errorf("pool cgroup of %s still there after the move: %v", sb, left)
	}
	ip := x.must(t, "inspectp", "--output", "go-template", "--template", "{{.status.network.ip}}", pod)
	if !strings.HasPrefix(ip, "10.77.0.") {
		t.Fatalf("pod IP %q, want one of the CNI network 10.77.0.0/24", ip)
	}
	// The host side of the pod's interface gave its address to the guest.
	ns := x.podNetns(t, pod)
	if out, err := exec.Command("nsenter", "--net="+ns, "ip", "-4", "-o", "addr", "show").CombinedOutput(); err != nil || strings.Contains(string(out), ip+"/") {
		t.Errorf("pod netns %s on the host: %q (%v), want no %s there any more", ns, out, err, ip)
	}

	app := x.createContainer(t, pod, podCfg, "app", []string{"sleep", "600"}, nil)
	x.must(t, "start", app)
	if got := harness.Adopted("k8s.io", pod); got != sb {
		t.Errorf("after the app started the pod's sandbox is %q, want %s", got, sb)
	}
	out := x.must(t, "exec", app, "sh", "-c", "ip -4 -o addr show; ip route; uname -r")
	if !strings.Contains(out, ip+"/24") || !strings.Contains(out, "default via 10.77.0.1") || !strings.Contains(out, "gvisor") {
		t.Errorf("the guest's network: %q, want %s/24 and default via 10.77.0.1 in gVisor", out, ip)
	}
	// The pod's hostname, not the pool's (every container of a gVisor
	// sandbox shares its root container's UTS namespace, which the pool
	// booted with its own).
	if out := x.must(t, "exec", app, "hostname"); out != "pp1" {
		t.Errorf("hostname in the pooled pod: %q, want the pod's pp1", out)
	}

	// The host reaches a server in the pod on the pod's IP.
	x.must(t, "exec", app, "sh", "-c", "(while true; do echo hello-from-pod | nc -l -p 8080; done >/dev/null 2>&1 &); true")
	var got string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "8080"), time.Second)
		if err != nil {
			continue
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		got, _ = bufio.NewReader(c).ReadString('\n')
		c.Close()
		if got != "" {
			break
		}
	}
	if strings.TrimSpace(got) != "hello-from-pod" {
		t.Errorf("a server in the pod on %s:8080 answered %q, want hello-from-pod", ip, got)
	}
	// kubectl port-forward reaches it too: the shim read the pod's address
	// before the attach took it from the host side.
	local := x.portForward(t, pod, 8080)
	fc, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", local), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = fc.SetDeadline(time.Now().Add(5 * time.Second))
	got, _ = bufio.NewReader(fc).ReadString('\n')
	fc.Close()
	if strings.TrimSpace(got) != "hello-from-pod" {
		t.Errorf("crictl port-forward to the pooled pod's 8080 answered %q, want hello-from-pod", got)
	}
	// Its loopback still serves the pod's containers, on all of 127/8 as
	// in a pod that booted its own sandbox, although the attach replaced
	// gVisor's route table (docs/pool.md).
	for _, lo := range []string{"127.0.0.1", "127.0.0.2"} {
		if out := x.must(t, "exec", app, "sh", "-c", "nc "+lo+" 8080 </dev/null"); out != "hello-from-pod" {
			t.Errorf("the pod's server on %s: %q", lo, out)
		}
	}
	// The pod reaches a server of the test's on the pod network's gateway.
	ln, err := net.Listen("tcp", "10.77.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello-pod-pool") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	if out := x.must(t, "exec", app, "wget", "-q", "-O", "-", "http://"+ln.Addr().String()+"/"); out != "hello-pod-pool" {
		t.Errorf("the pod to the gateway's server: %q", out)
	}

	removePodPool(t, x, pod, app, sb)
	for _, d := range parentDirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("the pod's cgroup %s (the kubelet's) after the pod was removed: %v, want it left to its owner", d, err)
		}
	}
}

// makeCgroup creates cgroup p (harness.MakeCgroup), removed with its
// parent when the test ends, and returns its directories.
func makeCgroup(t *testing.T, p string) []string {
	t.Helper()
	t.Cleanup(func() {
		harness.RemoveCgroup(p)
		harness.RemoveCgroup(path.Dir(p))
	})
	if err := harness.MakeCgroup(p); err != nil {
		t.Fatal(err)
	}
	return harness.CgroupDirs(p)
}

// memoryCgroup is pid's memory cgroup (v1), or its v2 cgroup.
func memoryCgroup(pid int) string {
	memory, unified := procCgroups(pid)
	if memory != "" {
		return memory
	}
	return unified
}

// TestCRIPodPoolNAT: a pod of a runtime handler whose gvx config has
// network = "nat" adopts a sandbox of that config's NAT pool and shares
// its NAT (eth0 10.0.2.15, a host server reached through 10.0.2.2); no
// interface of the pod's network namespace is attached; crictl
// port-forward reaches a server in it through that NAT.
func TestCRIPodPoolNAT(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	srv := startNATHTTP(t, "hello-pod-pool-nat")
	p := startNATPool(t, srv)
	x := newCRIEnvWith(t, criPoolHandler("gvxnatpool", p.Config))
	pod, podCfg := x.runPod(t, "ppn", "gvxnatpool")
	sb := harness.Adopted("k8s.io", pod)
	if sb == "" {
		t.Fatalf("pod %s booted its own sandbox (%s); pool log:\n%s", pod, x.shimSaid(pod, "boots its own sandbox"), p.Log())
	}
	app := x.createContainer(t, pod, podCfg, "app", []string{"sleep", "600"}, nil)
	x.must(t, "start", app)
	if out := x.must(t, "exec", app, "ip", "-4", "-o", "addr", "show"); !strings.Contains(out, "10.0.2.15/24") || strings.Contains(out, "10.77.0.") {
		t.Errorf("the NAT pod's addresses: %q, want eth0 10.0.2.15/24 and not the CNI address", out)
	}
	if out := x.must(t, "exec", app, "wget", "-q", "-O", "-", fmt.Sprintf("http://10.0.2.2:%d/", srv.port)); out != "hello-pod-pool-nat" {
		t.Errorf("the NAT pod through the pool sandbox's NAT: %q", out)
	}
	// kubectl port-forward reaches it through the pool sandbox's NAT.
	x.must(t, "exec", app, "sh", "-c", "mkdir -p /www && echo pooled-nat-forward > /www/index.html && (httpd -p 8080 -h /www &) >/dev/null 2>&1")
	x.waitListening(t, app, 8080)
	local := x.portForward(t, pod, 8080)
	if body, err := httpGetRetry(context.Background(), fmt.Sprintf("http://127.0.0.1:%d/", local), 20*time.Second); err != nil || strings.TrimSpace(body) != "pooled-nat-forward" {
		t.Errorf("crictl port-forward to the pooled NAT pod: %q, %v", body, err)
	}
	removePodPool(t, x, pod, app, sb)
}

// removePodPool stops and removes container app and pod, and checks that
// the pool sandbox sb the pod adopted went with it.
func removePodPool(t *testing.T, x *criEnv, pod, app, sb string) {
	t.Helper()
	x.must(t, "stop", "--timeout", "1", app)
	x.must(t, "rm", app)
	x.must(t, "stopp", pod)
	x.must(t, "rmp", pod)
	if _, err := os.Stat(string(harness.SandboxDir(sb))); !os.IsNotExist(err) {
		t.Errorf("pool sandbox %s after its pod was removed: %v, want it destroyed", sb, err)
	}
}
