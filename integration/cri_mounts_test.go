package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/gvxrun/gvx/api"
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

// hostTmpfs mounts a tmpfs at dir/tmpfs (a submount of dir, as critest
// makes), unmounted when the test ends.
func hostTmpfs(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "tmpfs")
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "gvxtest", p).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", p).Run() })
	return p
}

// fileOwner is the host uid owning path.
func fileOwner(t *testing.T, path string) uint32 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Uid
}

// TestCRIHostPath: hostPath mounts of root-only host paths (0700, owned by
// host root, below root-only parents — as critest makes them) are the
// container root's, as with runc, although the sandbox runs as host uid
// 100000: a directory read and written (files written belong to host root
// on the host), a file, a host path that is a symlink to a directory, and
// a read-only bind that is read-only inside but whose submount (a tmpfs)
// stays writable, as Linux's non-recursive read-only bind leaves it. No
// clone is mounted on the host, and nothing is left behind.
func TestCRIHostPath(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	rw, ro, other := t.TempDir(), t.TempDir(), t.TempDir()
	for p, data := range map[string]string{filepath.Join(rw, "in"): "secret-in\n", filepath.Join(other, "file"): "the-file\n", filepath.Join(ro, "top"): "ro-top\n"} {
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Root-only, as critest's os.MkdirTemp makes them.
	for _, d := range []string{rw, ro, other} {
		if err := os.Chmod(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sub := hostTmpfs(t, ro)
	linkTarget := filepath.Join(other, "target")
	if err := os.Mkdir(linkTarget, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(linkTarget, "l"), []byte("via-link\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(other, "link")
	if err := os.Symlink(linkTarget, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{rw, ro, other} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o700 || fileOwner(t, p) != 0 {
			t.Fatalf("%s is not a root-only directory: %v %v", p, st.Mode(), err)
		}
	}
	pod, podCfg := x.runPod(t, "phostpath", "gvx")
	script := `set -e
cat /mnt/rw/in
echo written > /mnt/rw/out
mkdir /mnt/rw/d
stat -c 'owner %u' /mnt/rw /mnt/rw/in
cat /mnt/file
echo appended >> /mnt/file
cat /mnt/link/l
touch /mnt/ro/tmpfs/sub-written
cat /mnt/ro/top
if touch /mnt/ro/new 2>/dev/null; then echo ro-writable; fi
echo done`
	id := x.createContainer(t, pod, podCfg, "hostpath", []string{"sh", "-c", script}, map[string]any{
		"mounts": []map[string]any{
			{"container_path": "/mnt/rw", "host_path": rw, "propagation": 0},
			{"container_path": "/mnt/file", "host_path": filepath.Join(other, "file")},
			{"container_path": "/mnt/link", "host_path": link},
			{"container_path": "/mnt/ro", "host_path": ro, "readonly": true},
		},
		"log_path": "hostpath.log",
	})
	x.must(t, "start", id)
	st := x.waitExited(t, id)
	logs := x.run(t, "logs", id)
	out := logs.stdout + logs.stderr
	if st != "CONTAINER_EXITED 0" {
		t.Fatalf("hostPath container: %q, logs:\n%s", st, out)
	}
	for _, want := range []string{"secret-in", "owner 0\nowner 0", "the-file", "via-link", "ro-top", "done"} {
		if !strings.Contains(out, want) {
			t.Errorf("container output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ro-writable") {
		t.Errorf("a file was created in the read-only bind:\n%s", out)
	}
	for _, p := range []string{filepath.Join(rw, "out"), filepath.Join(rw, "d"), filepath.Join(sub, "sub-written")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("written in the container, missing on the host: %v", err)
		} else if u := fileOwner(t, p); u != 0 {
			t.Errorf("%s is owned by host uid %d, want 0 (host root, as with runc)", p, u)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(other, "file")); string(data) != "the-file\nappended\n" {
		t.Errorf("bound file on the host: %q", data)
	}
	for _, m := range harness.MountsUnder("/") {
		if strings.Contains(m, api.HostBindDir) {
			t.Errorf("a host bind clone is mounted on the host at %s", m)
		}
	}
	x.must(t, "rm", id)
	x.must(t, "rmp", "-f", pod)
}

// TestCRIHostPathPropagation: HostToContainer (rslave) propagation shows
// a container a mount the host makes under its hostPath after the
// container started and None (rprivate) does not, with the hostPath a
// root-only directory the sandbox's host uid could not read.
func TestCRIHostPathPropagation(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	pod, podCfg := x.runPod(t, "pprop", "gvx")
	type tc struct {
		name        string
		propagation int
		wantSeen    bool
	}
	var ids []string
	var cases []tc
	var srcs, flags []string
	for _, c := range []tc{{"private", 0, false}, {"slave", 1, true}} {
		src := filepath.Join(t.TempDir(), "mnt")
		if err := os.MkdirAll(filepath.Join(src, "prop"), 0o700); err != nil {
			t.Fatal(err)
		}
		// Shared, so the host's later mount propagates (containerd
		// requires it of HostToContainer).
		for _, args := range [][]string{{"--bind", src, src}, {"--make-rshared", src}} {
			if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
				t.Fatalf("mount %v: %v: %s", args, err, out)
			}
		}
		t.Cleanup(func() { _ = exec.Command("umount", "-R", "-l", src).Run() })
		flagDir := t.TempDir()
		if err := os.Chmod(flagDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(flagDir, "flagFile"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		id := x.createContainer(t, pod, podCfg, "prop-"+c.name, []string{"sleep", "600"},
			map[string]any{"mounts": []map[string]any{{"container_path": src, "host_path": src, "propagation": c.propagation}}})
		x.must(t, "start", id)
		ids, cases, srcs, flags = append(ids, id), append(cases, c), append(srcs, src), append(flags, flagDir)
	}
	for i, c := range cases {
		prop := filepath.Join(srcs[i], "prop")
		if out, err := exec.Command("mount", "--bind", flags[i], prop).CombinedOutput(); err != nil {
			t.Fatalf("mount on the host: %v: %s", err, out)
		}
		r := x.run(t, "exec", "--sync", ids[i], "ls", "-A", prop)
		if r.code != 0 || strings.Contains(r.stderr, "ls:") {
			t.Errorf("%s: ls in the container: exit %d %q", c.name, r.code, r.stderr)
		}
		if seen := strings.Contains(r.stdout, "flagFile"); seen != c.wantSeen {
			t.Errorf("%s propagation: the host's mount seen in the container: %v, want %v (ls %q)", c.name, seen, c.wantSeen, r.stdout)
		}
	}
	for _, id := range ids {
		x.must(t, "rm", "-f", id)
	}
	x.must(t, "rmp", "-f", pod)
}

// TestCRIRecursiveReadOnly: the gvx handler advertises recursive
// read-only mounts (containerd's CRI learns it from the shim's runtime
// features), and a hostPath mount asking for them (readonly and
// recursive_read_only) is read-only inside the sandbox at every
// submount, where a plain read-only one leaves the submount writable.
func TestCRIRecursiveReadOnly(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	var info struct {
		RuntimeHandlers []struct {
			Name     string `json:"name"`
			Features struct {
				RRO bool `json:"recursive_read_only_mounts"`
			} `json:"features"`
		} `json:"runtimeHandlers"`
	}
	raw := x.must(t, "info")
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		t.Fatalf("crictl info: %v: %s", err, raw)
	}
	supported := false
	for _, h := range info.RuntimeHandlers {
		if h.Name == "gvx" {
			supported = h.Features.RRO
		}
	}
	if !supported {
		t.Errorf("the gvx handler does not report recursive read-only mounts: %+v", info.RuntimeHandlers)
	}
	src := t.TempDir()
	sub := hostTmpfs(t, src)
	pod, podCfg := x.runPod(t, "prro", "gvx")
	script := `for f in /mnt/rro/tmpfs/foo /mnt/rro/top; do touch $f 2>&1 | grep -q "Read-only file system" && echo "refused $f"; done
touch /mnt/ro/tmpfs/bar && echo "wrote ro-submount"
ls /mnt/rro/tmpfs >/dev/null && echo readable`
	id := x.createContainer(t, pod, podCfg, "rro", []string{"sh", "-c", script}, map[string]any{
		"mounts": []map[string]any{
			{"container_path": "/mnt/rro", "host_path": src, "readonly": true, "recursive_read_only": true},
			{"container_path": "/mnt/ro", "host_path": src, "readonly": true},
		},
		"log_path": "rro.log",
	})
	x.must(t, "start", id)
	st := x.waitExited(t, id)
	logs := x.run(t, "logs", id)
	out := logs.stdout + logs.stderr
	if st != "CONTAINER_EXITED 0" {
		t.Fatalf("rro container: %q, logs:\n%s", st, out)
	}
	for _, want := range []string{"refused /mnt/rro/tmpfs/foo", "refused /mnt/rro/top", "wrote ro-submount", "readable"} {
		if !strings.Contains(out, want) {
			t.Errorf("container output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(sub, "foo")); err == nil {
		t.Error("a file was written through the recursively read-only mount")
	}
	// CRI refuses rro with other than private propagation, and with rw.
	for _, m := range []map[string]any{
		{"container_path": "/mnt", "host_path": src, "readonly": true, "recursive_read_only": true, "propagation": 1},
		{"container_path": "/mnt", "host_path": src, "readonly": false, "recursive_read_only": true},
	} {
		cfg := x.writeJSON(t, "rro-bad.json", map[string]any{"metadata": map[string]string{"name": "rro-bad"}, "image": map[string]string{"image": "gvx.test/busybox:latest"},
			"command": []string{"true"}, "mounts": []map[string]any{m}})
		if r := x.run(t, "create", pod, cfg, podCfg); r.code == 0 {
			t.Errorf("create with rro mount %v succeeded", m)
		}
	}
	x.must(t, "rm", id)
	x.must(t, "rmp", "-f", pod)
}
