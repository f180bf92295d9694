package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/integration/harness"
)

// securityContext is a CRI container config's linux.security_context.
func securityContext(sc map[string]any) map[string]any {
	return map[string]any{"linux": map[string]any{"security_context": sc}}
}

// CRI's SecurityProfile.profile_type.
const (
	seccompRuntimeDefault = 0
	seccompUnconfined     = 1
	seccompLocalhost      = 2
)

// TestCRISeccomp: a container's seccomp profile (CRI's runtime/default and
// a localhost profile, which containerd puts in the spec's linux.seccomp)
// is enforced on its processes inside the sandbox — what critest's
// SeccompProfilePath specs check: the guest's /proc/self/status shows mode
// 2, a syscall the profile blocks fails with its errno — and an unconfined
// container has none.
func TestCRISeccomp(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	profile := filepath.Join(x.dir, "block-chmod.json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["chmod","fchmodat","fchmodat2"],"action":"SCMP_ACT_ERRNO"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	pod, podCfg := x.runPod(t, "pseccomp", "gvx")
	start := func(name string, seccomp map[string]any) string {
		sc := map[string]any{}
		if seccomp != nil {
			sc["seccomp"] = seccomp
		}
		id := x.createContainer(t, pod, podCfg, name, []string{"sleep", "600"}, securityContext(sc))
		x.must(t, "start", id)
		return id
	}
	for _, tc := range []struct {
		name    string
		seccomp map[string]any
		mode    string
	}{
		{"default", map[string]any{"profile_type": seccompRuntimeDefault}, "2"},
		{"localhost", map[string]any{"profile_type": seccompLocalhost, "localhost_ref": profile}, "2"},
		{"unconfined", map[string]any{"profile_type": seccompUnconfined}, "0"},
		{"nil", nil, "0"},
	} {
		id := start(tc.name, tc.seccomp)
		out := x.must(t, "exec", id, "grep", "Seccomp:", "/proc/self/status")
		if f := strings.Fields(out); len(f) != 2 || f[1] != tc.mode {
			t.Errorf("%s profile: %q in the guest, want Seccomp: %s", tc.name, out, tc.mode)
		}
		r := x.run(t, "exec", id, "chmod", "400", "/tmp")
		blocked := tc.name == "localhost"
		if blocked && (r.code == 0 || !strings.Contains(r.stderr+r.stdout, "Operation not permitted")) {
			t.Errorf("chmod under a profile that blocks it: exit %d %q, want Operation not permitted", r.code, r.stderr)
		}
		if !blocked && r.code != 0 {
			t.Errorf("%s profile: chmod failed: %q", tc.name, r.stderr)
		}
	}
	x.must(t, "rmp", "-f", pod)
}

// TestCRINoNewPrivs: allowPrivilegeEscalation (CRI's no_new_privs) decides
// whether a set-user-ID root binary raises a uid-1000 container's effective
// uid inside the sandbox, as critest's NoNewPrivs specs check; the
// sandbox's host processes keep no_new_privs either way.
func TestCRINoNewPrivs(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin", "euid")
	if b, err := os.ReadFile(buildTestdata(t, "euid")); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	// busybox beside it, to look around in the guest.
	if b, err := os.ReadFile("/bin/busybox"); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, app := range []string{"sh", "sleep", "stat", "grep"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", app)); err != nil {
			t.Fatal(err)
		}
	}
	x.importRootfs(t, root, "gvx.test/nonewprivs:latest", `["/bin/euid"]`)
	pod, podCfg := x.runPod(t, "pnnp", "gvx")
	// What the guest sees of the binary and of a uid-1000 process.
	probeCfg := securityContext(map[string]any{"run_as_user": map[string]any{"value": 1000}})
	probeCfg["image"] = map[string]string{"image": "gvx.test/nonewprivs:latest"}
	probe := x.createContainer(t, pod, podCfg, "probe", []string{"sleep", "600"}, probeCfg)
	x.must(t, "start", probe)
	if out := x.must(t, "exec", probe, "stat", "-c", "%a %u", "/bin/euid"); out != "4755 0" {
		host := filepath.Join(harness.State.Rootfs("k8s.io", probe), "bin", "euid")
		mode := "?"
		if fi, err := os.Stat(host); err == nil {
			mode = fi.Mode().String()
		}
		t.Errorf("the set-user-ID binary in the guest: %q, want 4755 0 (on the host, %s: %s)", out, host, mode)
	}
	if out := x.must(t, "exec", probe, "/bin/euid"); out != "Effective uid: 0" {
		t.Errorf("exec of the set-user-ID binary by uid 1000: %q (%s), want Effective uid: 0", out,
			x.run(t, "exec", probe, "sh", "-c", "grep -E 'Uid|NoNewPrivs|Cap' /proc/self/status; grep -E ' / ' /proc/mounts").stdout)
	}
	for _, tc := range []struct {
		nnp  bool
		want string
	}{{true, "Effective uid: 1000"}, {false, "Effective uid: 0"}} {
		name := "nnp-false"
		if tc.nnp {
			name = "nnp-true"
		}
		cfg := securityContext(map[string]any{"no_new_privs": tc.nnp, "run_as_user": map[string]any{"value": 1000}})
		cfg["image"] = map[string]string{"image": "gvx.test/nonewprivs:latest"}
		cfg["log_path"] = name + ".log"
		id := x.createContainer(t, pod, podCfg, name, nil, cfg)
		x.must(t, "start", id)
		if st := x.waitExited(t, id); st != "CONTAINER_EXITED 0" {
			t.Errorf("%s: %q, want CONTAINER_EXITED 0", name, st)
		}
		if out := strings.TrimSpace(x.run(t, "logs", id).stdout); out != tc.want {
			t.Errorf("no_new_privs %v, a set-user-ID root binary run by uid 1000: %q, want %q", tc.nnp, out, tc.want)
		}
	}
	sentries := 0
	for _, pid := range harness.Descendants(shimPidAt(t, x.ctrd.Socket(), pod)) {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		name, _, _ := strings.Cut(string(cmd), "\x00")
		if name != "runsc-sandbox" && name != "runsc-gofer" {
			continue
		}
		if name == "runsc-sandbox" {
			sentries++
		}
		if p, err := readProc(pid); err == nil && p.noNewPrivs != "1" {
			t.Errorf("sandbox host process %d (%s): NoNewPrivs %q, want 1", pid, name, p.noNewPrivs)
		}
	}
	if sentries != 1 {
		t.Errorf("found %d Sentry processes below the pod's shim, want 1", sentries)
	}
	x.must(t, "rmp", "-f", pod)
}

// importRootfs packs directory root into an image ref (hack/oci-archive.sh)
// running cmd and imports it into the CRI namespace.
func (x *criEnv) importRootfs(t *testing.T, root, ref, cmd string) {
	t.Helper()
	tarball := filepath.Join(t.TempDir(), "image.tar")
	if out, err := exec.Command("../hack/oci-archive.sh", root, tarball, ref, cmd).CombinedOutput(); err != nil {
		t.Fatalf("oci-archive %s: %v: %s", ref, err, out)
	}
	r, err := e.run(context.Background(), "", filepath.Join(e.ctrdBin, "ctr"), "--address", x.ctrd.Socket(), "--namespace", "k8s.io",
		"images", "import", tarball)
	if err != nil || r.code != 0 {
		t.Fatalf("import %s: %v %s", ref, err, r.stderr)
	}
}

// TestCRIMaskedReadonlyPaths: a container's maskedPaths and readonlyPaths
// (CRI's security context; gVisor ignores both) are applied inside the
// sandbox, as critest's MaskedPaths and ReadonlyPaths specs check: a
// masked file reads empty and cannot be executed or written, a masked
// directory is empty, a read-only path cannot be written while the rest
// of the root filesystem can.
func TestCRIMaskedReadonlyPaths(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	pod, podCfg := x.runPod(t, "pmask", "gvx")
	id := x.createContainer(t, pod, podCfg, "masked", []string{"sleep", "600"}, securityContext(map[string]any{
		"masked_paths":   []string{"/etc/passwd", "/etc/hostname", "/root"},
		"readonly_paths": []string{"/tmp"},
	}))
	x.must(t, "start", id)
	if out := x.must(t, "exec", id, "cat", "/etc/passwd"); out != "" {
		t.Errorf("masked /etc/passwd reads %q, want nothing", out)
	}
	if r := x.run(t, "exec", id, "sh", "-c", "echo x >> /etc/hostname"); r.code == 0 {
		t.Errorf("masked /etc/hostname was writable")
	}
	if out := x.must(t, "exec", id, "ls", "-A", "/root"); out != "" {
		t.Errorf("masked directory /root lists %q, want nothing", out)
	}
	if r := x.run(t, "exec", id, "touch", "/tmp/test"); r.code == 0 || !strings.Contains(r.stderr, "Read-only file system") {
		t.Errorf("touch in read-only /tmp: exit %d %q, want Read-only file system", r.code, r.stderr)
	}
	if r := x.run(t, "exec", id, "touch", "/var/ok"); r.code != 0 {
		t.Errorf("touch outside the read-only paths: %q", r.stderr)
	}
	// Unmasked, the same image shows what the masks hide.
	plain := x.createContainer(t, pod, podCfg, "plain", []string{"sleep", "600"}, nil)
	x.must(t, "start", plain)
	if out := x.must(t, "exec", plain, "cat", "/etc/passwd"); !strings.Contains(out, "root:x:0:0") {
		t.Errorf("unmasked /etc/passwd: %q", out)
	}
	x.must(t, "exec", plain, "touch", "/tmp/test")
	x.must(t, "rmp", "-f", pod)
}

// TestCRIBridgeCapability: brctl (critest's "Privileged is true" and
// "adding capability" specs run `brctl addbr foobar`) works in a
// container with CAP_NET_ADMIN — privileged, or given the capability —
// and fails without it. gVisor has neither a /sys/class/net nor the
// bridge ioctls; gvx supplies both.
func TestCRIBridgeCapability(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	pod, podCfg := x.runPod(t, "pbridge", "gvx")
	netAdmin := x.createContainer(t, pod, podCfg, "netadmin", []string{"sleep", "600"}, securityContext(map[string]any{
		"capabilities": map[string]any{"add_capabilities": []string{"NET_ADMIN"}},
	}))
	x.must(t, "start", netAdmin)
	if r := x.run(t, "exec", netAdmin, "brctl", "addbr", "foobar"); r.code != 0 {
		t.Errorf("brctl addbr with NET_ADMIN: exit %d %q", r.code, r.stderr)
	}
	if out := x.must(t, "exec", netAdmin, "ip", "-o", "link", "show", "foobar"); !strings.Contains(out, "foobar") {
		t.Errorf("bridge foobar after brctl addbr: %q", out)
	}
	if r := x.run(t, "exec", netAdmin, "brctl", "addbr", "foobar"); r.code == 0 {
		t.Errorf("a second brctl addbr foobar succeeded")
	}
	if r := x.run(t, "exec", netAdmin, "brctl", "delbr", "foobar"); r.code != 0 {
		t.Errorf("brctl delbr: exit %d %q", r.code, r.stderr)
	}
	if r := x.run(t, "exec", netAdmin, "ip", "link", "show", "foobar"); r.code == 0 {
		t.Errorf("bridge foobar still there after brctl delbr")
	}
	plain := x.createContainer(t, pod, podCfg, "plain", []string{"sleep", "600"}, nil)
	x.must(t, "start", plain)
	// Without CAP_NET_ADMIN it fails (at its chdir: the /sys/class gvx
	// mounts is for containers that may manage the network).
	if r := x.run(t, "exec", plain, "brctl", "addbr", "foobar2"); r.code == 0 {
		t.Errorf("brctl addbr without NET_ADMIN succeeded")
	}
	if r := x.run(t, "exec", plain, "ip", "link", "add", "foobar3", "type", "bridge"); r.code == 0 || !strings.Contains(r.stderr, "not permitted") {
		t.Errorf("ip link add type bridge without NET_ADMIN: exit %d %q, want Operation not permitted", r.code, r.stderr)
	}
	x.must(t, "rmp", "-f", pod)

	priv := x.writeJSON(t, "ppriv.json", map[string]any{
		"metadata":      map[string]string{"name": "ppriv", "namespace": "default", "uid": "uid-ppriv"},
		"log_directory": filepath.Join(x.dir, "logs-ppriv"),
		"linux":         map[string]any{"security_context": map[string]any{"privileged": true}},
	})
	ppod := x.must(t, "runp", "--runtime", "gvx", priv)
	t.Cleanup(func() { x.run(t, "rmp", "-f", ppod) })
	p := x.createContainer(t, ppod, priv, "privileged", []string{"sleep", "600"}, securityContext(map[string]any{"privileged": true}))
	x.must(t, "start", p)
	if r := x.run(t, "exec", p, "brctl", "addbr", "foobar"); r.code != 0 {
		t.Errorf("brctl addbr in a privileged container: exit %d %q", r.code, r.stderr)
	}
	x.must(t, "rmp", "-f", ppod)
}

// TestCRISysctlRefused: a pod sysctl gVisor's kernel does not implement
// (critest's kernel.shm_rmid_forced and fs.mqueue.msg_max) is refused at
// RunPodSandbox with an error naming it, rather than run without it; the
// net.* sysctls containerd adds to every pod are not.
func TestCRISysctlRefused(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	for _, key := range []string{"kernel.shm_rmid_forced", "fs.mqueue.msg_max"} {
		cfg := x.writeJSON(t, "psysctl.json", map[string]any{
			"metadata":      map[string]string{"name": "psysctl", "namespace": "default", "uid": "uid-psysctl"},
			"log_directory": filepath.Join(x.dir, "logs-psysctl"),
			"linux":         map[string]any{"sysctls": map[string]string{key: "1"}},
		})
		r := x.run(t, "runp", "--runtime", "gvx", cfg)
		if r.code == 0 {
			x.run(t, "rmp", "-f", strings.TrimSpace(r.stdout))
			t.Errorf("pod with sysctl %s started", key)
		} else if !strings.Contains(r.stderr, "sysctl "+key) || !strings.Contains(r.stderr, "not supported") {
			t.Errorf("pod with sysctl %s: %q, want an error naming it", key, r.stderr)
		}
	}
	// The pods runPod starts carry containerd's own net.* sysctls.
	pod, _ := x.runPod(t, "pnet", "gvx")
	x.must(t, "rmp", "-f", pod)
}
