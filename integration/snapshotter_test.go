package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/core/snapshots/proxy"
	"github.com/containerd/errdefs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gvxrun/gvx/bench/snapshotter/layered"
	"github.com/gvxrun/gvx/integration/harness"
)

const (
	snapName   = "ext4lite"
	snapNS     = "gvxsnap"
	layeredRef = "gvx.test/layered:latest"
)

// serveProc is a running `gvx snapshotter serve`.
type serveProc struct {
	root, sock string
	cmd        *exec.Cmd
	done       chan struct{}
	log        string
}

// startServe starts `gvx snapshotter serve` on root and sock with extra
// environment variables and waits for its socket. Cleanup stops it.
func startServe(t testing.TB, root, sock string, env ...string) *serveProc {
	t.Helper()
	p := &serveProc{root: root, sock: sock, done: make(chan struct{}), log: filepath.Join(t.TempDir(), "serve.log")}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	os.Remove(sock) // a socket left by a killed predecessor
	p.cmd = exec.Command(filepath.Join(e.gvxBin, "gvx"), "snapshotter", "serve",
		"--root", root, "--address", sock, "--default-size", "1G", "--log-level", "debug")
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(p.stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, err := os.Stat(sock); err == nil && st.Mode()&os.ModeSocket != 0 {
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("gvx snapshotter serve exited at start: %s", p.output())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("gvx snapshotter serve: no socket after 10s: %s", p.output())
		}
	}
}

func (p *serveProc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// stop sends SIGTERM and waits (SIGKILL after 10 s).
func (p *serveProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitKilled waits for the process to die and requires SIGKILL.
func (p *serveProc) waitKilled(t testing.TB) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("gvx snapshotter serve still running: %s", p.output())
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("gvx snapshotter serve ended with %v, want SIGKILL: %s", p.cmd.ProcessState, p.output())
	}
}

// client returns a snapshotter talking to the daemon directly.
func (p *serveProc) client(t testing.TB) snapshots.Snapshotter {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+p.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return proxy.NewSnapshotter(snapshotsapi.NewSnapshotsClient(conn), snapName)
}

// images lists the image files in the snapshotter's root.
func (p *serveProc) images(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(p.root, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// checkFiles requires exactly one image file per snapshot the daemon
// reports, and nothing else (no clone or deletion left half done).
func checkFiles(t *testing.T, p *serveProc, sn snapshots.Snapshotter) []string {
	t.Helper()
	var keys []string
	err := sn.Walk(context.Background(), func(_ context.Context, i snapshots.Info) error {
		keys = append(keys, i.Name+"="+i.Kind.String())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	files := p.images(t)
	for _, f := range files {
		if _, err := strconv.ParseUint(f, 10, 64); err != nil {
			t.Errorf("unexpected file in %s/snapshots: %s", p.root, f)
		}
	}
	if len(files) != len(keys) {
		t.Errorf("%d image files %v for %d snapshots %v", len(files), files, len(keys), keys)
	}
	return keys
}

// snapEnv is a private containerd with the ext4lite proxy plugin, served
// by its own `gvx snapshotter serve` on an XFS loop filesystem.
type snapEnv struct {
	mnt   string
	serve *serveProc
	ctrd  *harness.Containerd
}

func newSnapEnv(t *testing.T) *snapEnv {
	t.Helper()
	requireEnv(t)
	x := &snapEnv{mnt: loopFS(t, "xfs")}
	t.Cleanup(func() { checkSnapLeaks(t, x.mnt) })
	sockDir := t.TempDir()
	x.serve = startServe(t, filepath.Join(x.mnt, "ext4lite"), filepath.Join(sockDir, "ext4lite.sock"))
	// The transfer service (ctr images import without --local) unpacks only
	// for the snapshotters its unpack_config lists.
	c, err := harness.StartWithConfig(context.Background(), harness.BinsFromEnv(), fmt.Sprintf(`
[proxy_plugins.%[1]s]
  type = "snapshot"
  address = %[2]q
[[plugins."io.containerd.transfer.v1.local".unpack_config]]
  platform = "linux/%[3]s"
  snapshotter = "overlayfs"
  differ = "walking"
[[plugins."io.containerd.transfer.v1.local".unpack_config]]
  platform = "linux/%[3]s"
  snapshotter = "%[1]s"
  differ = "walking"
`, snapName, x.serve.sock, goruntime.GOARCH))
	if err != nil {
		t.Fatal(err)
	}
	x.ctrd = c
	t.Cleanup(c.Close)
	return x
}

// checkSnapLeaks fails the test if a loop device, a mount or a gvx
// snapshotter process of the test is left.
func checkSnapLeaks(t *testing.T, mnt string) {
	t.Helper()
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(string(b), mnt+"/") {
			t.Errorf("loop device left: %s on %s", filepath.Base(filepath.Dir(filepath.Dir(f))), strings.TrimSpace(string(b)))
		}
	}
	for _, m := range harness.MountsUnder(mnt + "/") {
		t.Errorf("mount left: %s", m)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "snapshotter\x00serve") && strings.Contains(string(b), mnt) {
			t.Errorf("process left: %s: %s", p, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}

func (x *snapEnv) ctr(t *testing.T, args ...string) result {
	t.Helper()
	r, err := e.run(context.Background(), "", filepath.Join(e.ctrdBin, "ctr"), ctrArgs(x.ctrd, snapNS, args)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (x *snapEnv) mustCtr(t *testing.T, args ...string) string {
	t.Helper()
	r := x.ctr(t, args...)
	if r.code != 0 {
		t.Fatalf("ctr %s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

func (x *snapEnv) nerdctl(t *testing.T, args ...string) result {
	t.Helper()
	return runNerdctl(t, []string{
		"--address", x.ctrd.Socket(), "--namespace", snapNS, "--snapshotter", snapName,
		"--data-root", filepath.Join(x.ctrd.Dir, "nerdctl"),
		"--cni-path", "/usr/lib/cni", "--cni-netconfpath", filepath.Join(x.ctrd.Dir, "cni"),
	}, args)
}

// removeContainer deletes a runc container and its snapshot whatever
// state it is in.
func (x *snapEnv) removeContainer(t *testing.T, id string) {
	t.Helper()
	t.Cleanup(func() {
		x.ctr(t, "task", "kill", "-s", "KILL", id)
		for range 100 {
			r := x.ctr(t, "task", "rm", "-f", id)
			if r.code == 0 || strings.Contains(r.stderr, "not found") {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		x.ctr(t, "container", "rm", id)
	})
}

// layeredImage writes a three-layer image on top of the busybox test
// image: layer 2 adds /layer2 and /etc/motd, layer 3 deletes a file of
// layer 2 (a whiteout) and rewrites /etc/motd.
func layeredImage(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "layered.tar")
	err := layered.AddLayers(filepath.Join(e.images, "busybox.tar"), dst, layeredRef,
		layered.Layer{
			{Path: "layer2", Dir: true},
			{Path: "layer2/hello", Data: []byte("hello from layer 2\n")},
			{Path: "layer2/doomed", Data: []byte("deleted by layer 3\n")},
			{Path: "etc/motd", Data: []byte("motd of layer 2\n")},
		},
		layered.Layer{
			{Path: "layer2/doomed", Whiteout: true},
			{Path: "etc/motd", Data: []byte("motd of layer 3\n")},
		})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestSnapshotterContainerd: containerd with the ext4lite proxy plugin
// unpacks a single- and a multi-layer image into ext4 images, runs
// containers with runc through ctr and nerdctl on reflink clones, keeps
// their root filesystems apart, and leaves nothing once they are gone.
func TestSnapshotterContainerd(t *testing.T) {
	x := newSnapEnv(t)
	t.Cleanup(func() {
		x.ctr(t, "images", "rm", "--sync", busybox, layeredRef)
	})
	direct := x.serve.client(t)

	t.Run("unpacked", func(t *testing.T) {
		// Both import paths: the transfer service (configured above) and
		// the client-side one (--local).
		x.mustCtr(t, "images", "import", "--snapshotter", snapName, filepath.Join(e.images, "busybox.tar"))
		if keys := checkFiles(t, x.serve, direct); len(keys) != 1 || !strings.HasSuffix(keys[0], "=Committed") {
			t.Fatalf("snapshots after importing busybox: %v, want its one layer committed", keys)
		}
		x.mustCtr(t, "images", "import", "--local", "--snapshotter", snapName, layeredImage(t))
		// busybox's layer is the layered image's first: 3 committed snapshots.
		keys := checkFiles(t, x.serve, direct)
		if len(keys) != 3 {
			t.Fatalf("snapshots after import: %v, want 3 committed", keys)
		}
		for _, k := range keys {
			if !strings.HasSuffix(k, "=Committed") {
				t.Errorf("snapshot %s after import, want only committed ones", k)
			}
		}
	})

	t.Run("ctr run", func(t *testing.T) {
		x.removeContainer(t, "layers")
		r := x.ctr(t, "run", "--rm", "--snapshotter", snapName, layeredRef, "layers",
			"sh", "-c", "cat /layer2/hello /etc/motd; test -e /layer2/doomed && echo doomed still there; mount | grep ' / '")
		if r.code != 0 {
			t.Fatalf("ctr run: exit %d: %s", r.code, r.stderr)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 3 || lines[0] != "hello from layer 2" || lines[1] != "motd of layer 3" || !strings.Contains(lines[2], "ext4") {
			t.Errorf("stdout %q: want layer 2's file, layer 3's motd, no whiteout-deleted file, an ext4 root", r.stdout)
		}
	})

	t.Run("isolation", func(t *testing.T) {
		for _, id := range []string{"iso1", "iso2"} {
			x.removeContainer(t, id)
			x.mustCtr(t, "run", "-d", "--snapshotter", snapName, layeredRef, id, "sleep", "1000")
		}
		x.mustCtr(t, "task", "exec", "--exec-id", "w", "iso1", "sh", "-c", "echo iso1 > /etc/motd; echo secret > /secret")
		if out := x.mustCtr(t, "task", "exec", "--exec-id", "r", "iso2", "sh", "-c", "cat /etc/motd; ls /secret 2>&1 || true"); !strings.Contains(out, "motd of layer 3") || !strings.Contains(out, "No such file") {
			t.Errorf("iso2 sees %q: want the image's motd and no /secret", out)
		}
		if out := x.mustCtr(t, "task", "exec", "--exec-id", "r", "iso1", "cat", "/etc/motd", "/secret"); out != "iso1\nsecret\n" {
			t.Errorf("iso1 reads back %q", out)
		}
		// The container's rootfs is a loop-mounted ext4 image in ext4lite's
		// root, and a reflink clone: it shares extents with its parent and
		// its usage is far below its allocation.
		m := x.mustCtr(t, "snapshots", "--snapshotter", snapName, "mounts", "/mnt", "iso1")
		if !strings.Contains(m, "mount -t ext4 "+x.serve.root+"/snapshots/") || !strings.Contains(m, "-o loop,rw") {
			t.Errorf("mounts of iso1: %q, want an ext4 loop mount of an image in %s", m, x.serve.root)
		}
		img := strings.Fields(m)[3]
		if out, _ := exec.Command("filefrag", "-v", img).CombinedOutput(); !strings.Contains(string(out), "shared") {
			t.Errorf("image %s of iso1 shares no extents (not a reflink clone?):\n%s", img, out)
		}
	})

	t.Run("nerdctl run", func(t *testing.T) {
		r := x.nerdctl(t, "run", "--rm", "--net", "none", layeredRef, "cat", "/layer2/hello")
		if r.code != 0 || r.stdout != "hello from layer 2\n" {
			t.Fatalf("nerdctl run: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
		}
	})

	top := t // the daemon and its client outlive the subtest that restarts them
	t.Run("crash during prepare through containerd", func(t *testing.T) {
		// Kill the daemon inside Prepare's transaction; containerd reports
		// the error, and once the daemon is back the same prepare works.
		parent := x.topSnapshot(t)
		x.serve.stop()
		x.serve = startServe(top, x.serve.root, x.serve.sock, "GVX_SNAPSHOTTER_CRASH_AT=prepare-renamed")
		// containerd redials the restarted daemon with backoff: until it
		// has, prepares fail with Unavailable without reaching the daemon.
		var r result
		for range 100 {
			r = x.ctr(t, "snapshots", "--snapshotter", snapName, "prepare", "crashy", parent)
			if r.code == 0 || !strings.Contains(r.stderr, "Unavailable") {
				break
			}
			select {
			case <-x.serve.done:
			default:
				time.Sleep(100 * time.Millisecond)
				continue
			}
			break // the daemon died: the prepare reached it
		}
		if r.code == 0 {
			t.Fatal("prepare succeeded although the daemon was killed")
		}
		x.serve.waitKilled(t)
		x.serve = startServe(top, x.serve.root, x.serve.sock)
		direct = x.serve.client(top)
		checkFiles(t, x.serve, direct)
		for range 100 { // containerd redials the socket with backoff
			r = x.ctr(t, "snapshots", "--snapshotter", snapName, "prepare", "crashy", parent)
			// While gRPC backs off it answers Unavailable, which ctr
			// prints either by code or as the last dial's "connection
			// error" (refused while the daemon was down).
			if r.code == 0 || !strings.Contains(r.stderr, "Unavailable") && !strings.Contains(r.stderr, "connection error") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if r.code != 0 {
			t.Fatalf("prepare after restart: exit %d: %s", r.code, r.stderr)
		}
		x.mustCtr(t, "snapshots", "--snapshotter", snapName, "rm", "crashy")
		checkFiles(t, x.serve, direct)
	})

	t.Run("cleanup", func(t *testing.T) {
		x.mustCtr(t, "images", "rm", "--sync", busybox, layeredRef)
		if keys := checkFiles(t, x.serve, direct); len(keys) != 0 {
			t.Errorf("snapshots left after removing the images: %v", keys)
		}
	})
}

// topSnapshot is the chain ID of the layered image's top layer, i.e. its
// committed snapshot name in containerd.
func (x *snapEnv) topSnapshot(t *testing.T) string {
	t.Helper()
	// The deepest committed snapshot: containerd also keeps short-lived
	// views (e.g. "/tmp/initial…") that cannot be parents.
	out := x.mustCtr(t, "snapshots", "--snapshotter", snapName, "ls")
	parent := map[string]string{}
	for _, l := range strings.Split(out, "\n")[1:] {
		f := strings.Fields(l)
		if len(f) == 3 && f[2] == "Committed" {
			parent[f[0]] = f[1]
		} else if len(f) == 2 && f[1] == "Committed" {
			parent[f[0]] = ""
		}
	}
	var deepest string
	depth := -1
	for key := range parent {
		if strings.HasPrefix(key, "crashy") {
			continue
		}
		d := 0
		for p := parent[key]; p != ""; p = parent[p] {
			d++
		}
		if d > depth {
			depth, deepest = d, key
		}
	}
	if deepest == "" {
		t.Fatalf("no committed snapshot in %q", out)
	}
	return deepest
}

// TestSnapshotterCrash kills `gvx snapshotter serve` with SIGKILL at
// every step of Prepare, Commit and Remove and checks, after a restart,
// that metadata and files agree, that the operation happened entirely or
// not at all, and that it can be redone.
func TestSnapshotterCrash(t *testing.T) {
	requireEnv(t)
	mnt := loopFS(t, "xfs")
	t.Cleanup(func() { checkSnapLeaks(t, mnt) })
	ctx := context.Background()
	sock := filepath.Join(t.TempDir(), "s.sock")
	cases := []struct {
		point string
		op    func(snapshots.Snapshotter) error
		after string // the snapshot "c" after restart: "", "Active" or "Committed"
	}{
		{"prepare-cloned", func(s snapshots.Snapshotter) error { _, err := s.Prepare(ctx, "c", "base"); return err }, ""},
		{"prepare-renamed", func(s snapshots.Snapshotter) error { _, err := s.Prepare(ctx, "c", "base"); return err }, ""},
		{"prepare-committed", func(s snapshots.Snapshotter) error { _, err := s.Prepare(ctx, "c", "base"); return err }, "Active"},
		{"commit-synced", func(s snapshots.Snapshotter) error { return s.Commit(ctx, "c", "work") }, ""},
		{"commit-in-txn", func(s snapshots.Snapshotter) error { return s.Commit(ctx, "c", "work") }, ""},
		{"remove-committed", func(s snapshots.Snapshotter) error { return s.Remove(ctx, "work") }, ""},
	}
	for i, c := range cases {
		t.Run(c.point, func(t *testing.T) {
			root := filepath.Join(mnt, strconv.Itoa(i))
			p := startServe(t, root, sock)
			sn := p.client(t)
			if _, err := sn.Prepare(ctx, "base-work", ""); err != nil {
				t.Fatal(err)
			}
			if err := sn.Commit(ctx, "base", "base-work"); err != nil {
				t.Fatal(err)
			}
			if _, err := sn.Prepare(ctx, "work", "base"); err != nil {
				t.Fatal(err)
			}
			p.stop()

			p = startServe(t, root, sock, "GVX_SNAPSHOTTER_CRASH_AT="+c.point)
			if err := c.op(p.client(t)); !errdefs.IsUnavailable(err) {
				t.Errorf("operation during the crash: %v, want Unavailable", err)
			}
			p.waitKilled(t)

			p = startServe(t, root, sock)
			sn = p.client(t)
			keys := strings.Join(checkFiles(t, p, sn), " ")
			wantWork := c.point != "remove-committed"
			if strings.Contains(keys, "work=Active") != wantWork {
				t.Errorf("snapshots %s: work should exist: %v", keys, wantWork)
			}
			if got := kindOf(keys, "c"); got != c.after {
				t.Errorf("snapshots %s: c is %q, want %q", keys, got, c.after)
			}
			// Redo and undo the operation's kind of work.
			if _, err := sn.Prepare(ctx, "again", "base"); err != nil {
				t.Fatal(err)
			}
			if err := sn.Commit(ctx, "again-c", "again"); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"again-c", "c", "work", "base"} {
				if err := sn.Remove(ctx, k); err != nil && !errdefs.IsNotFound(err) {
					t.Fatal(err)
				}
			}
			if keys := checkFiles(t, p, sn); len(keys) != 0 {
				t.Errorf("left: %v", keys)
			}
			p.stop()
		})
	}
}

// TestSnapshotterServeRefusals: a second daemon on the same root, or on
// a socket another daemon serves, exits with an error saying so, and the
// first keeps serving.
func TestSnapshotterServeRefusals(t *testing.T) {
	requireEnv(t)
	dir := t.TempDir()
	p := startServe(t, filepath.Join(dir, "root"), filepath.Join(dir, "a.sock"))
	for _, c := range []struct{ root, sock, want string }{
		{filepath.Join(dir, "root"), filepath.Join(dir, "b.sock"), "is in use by another process"},
		{filepath.Join(dir, "root2"), filepath.Join(dir, "a.sock"), "another process serves this socket"},
	} {
		r, err := e.run(context.Background(), "", filepath.Join(e.gvxBin, "gvx"), "snapshotter", "serve", "--root", c.root, "--address", c.sock)
		if err != nil {
			t.Fatal(err)
		}
		if r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("second serve on %s, %s: exit %d, stderr %q; want an error saying %q", c.root, c.sock, r.code, r.stderr, c.want)
		}
	}
	if _, err := p.client(t).Prepare(context.Background(), "still-serving", ""); err != nil {
		t.Errorf("the first daemon stopped serving: %v", err)
	}
}

// kindOf finds key's kind in "key=Kind ..." ("" when absent).
func kindOf(keys, key string) string {
	for _, k := range strings.Fields(keys) {
		if n, kind, _ := strings.Cut(k, "="); n == key {
			return kind
		}
	}
	return ""
}
