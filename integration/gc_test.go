package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/integration/harness"
)

// TestGC plants one of each kind of leftover the janitor knows — each made
// the way it happens (a sandbox whose shim died with its record lost, a
// shim whose container containerd forgot, a pool server killed with its
// sandboxes ready, a loop device, a mount, a cgroup, state directories, a
// volume clone, an image pool's lease, a sandbox past its lifetime, stdio
// FIFOs whose creator died, a shim socket nothing listens on) —
// checks that `gvx gc --dry-run` reports each and changes nothing, that
// `gvx gc` reclaims each, that a second sweep finds nothing, and that
// nothing is left on the host.
func TestGC(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	ctx := namespaces.WithNamespace(context.Background(), testNS)
	c, err := client.New(e.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := harness.State

	// A sandbox whose shim died after its record was lost: containerd's
	// cleanup (manager.Stop) has nothing to release, the Sentry runs on.
	orphan := startDetached(t, "gc-orphan", "sleep", "600")
	bundle := filepath.Join(e.dir, "state", "io.containerd.runtime.v2.task", testNS, "gc-orphan")
	if err := os.Remove(filepath.Join(bundle, "gvx-task.json")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(shimPid(t, "gc-orphan"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "gc-orphan")
	_, _ = e.ctrResult(context.Background(), "task", "rm", "-f", "gc-orphan")
	mustCtr(t, "container", "rm", "gc-orphan")
	if !procfs.Alive(orphan) {
		t.Fatalf("the orphan's Sentry %d died with its shim: nothing planted", orphan)
	}

	// A shim whose container containerd forgot (its metadata deleted under
	// a running task): nobody will delete its task.
	startDetached(t, "gc-shim", "sleep", "600")
	shim := shimPid(t, "gc-shim")
	if err := c.ContainerService().Delete(ctx, "gc-shim"); err != nil {
		t.Fatal(err)
	}

	// A sandbox past its lifetime (the label gives it one second).
	cleanupTask(t, "gc-life")
	mustCtr(t, "run", "-d", "--runtime", runtime, "--label", api.AnnotationMaxLifetime+"=1s", busybox, "gc-life", "sleep", "600")

	// A pool server killed with two sandboxes ready.
	p := startPool(t, 2)
	p.Kill()
	poolSandboxes, _ := filepath.Glob(filepath.Join(string(p.Dir), api.PoolSandboxPrefix+"*"))
	if len(poolSandboxes) != 2 {
		t.Fatalf("pool sandboxes after the server's kill: %v", poolSandboxes)
	}

	// A volume directory with a stray loop device and a stray clone.
	vols := t.TempDir()
	vol := filepath.Join(vols, "data.ext4")
	gvx(t, "volume", "create", "--size", "32M", vol)
	gvx(t, "volume", "clone", vol, filepath.Join(vols, ".data-gc-gone.ext4"))
	out, err := exec.Command("losetup", "-f", "--show", vol).Output()
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", loop).Run() })

	// A task's rootfs mount point with a mount, staging and sentry dirs of
	// tasks long gone, and a pool sandbox's cgroup with no sandbox.
	mnt := st.Rootfs(testNS, "gc-mount")
	if err := os.MkdirAll(mnt, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH); _ = os.RemoveAll(mnt) })
	for _, d := range []string{st.Volumes(testNS, "gc-gone"), filepath.Join(st.SentryRoot("gc-gone"), testNS)} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
	}
	cgroup := "/gvx-pool/" + api.PoolSandboxPrefix + "gcplanted"
	for _, h := range cgroupHierarchies() {
		if err := os.Mkdir(filepath.Join(h, cgroup[1:]), 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(filepath.Join(h, cgroup[1:])) })
	}

	// An image pool's lease whose pool is gone.
	lease, err := c.LeasesService().Create(ctx, leases.WithID("gvx-pool-gctest"), leases.WithLabel(api.LeaseLabel, filepath.Join(st.Pools(), "0000gcgone")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.LeasesService().Delete(ctx, lease) })

	// The stdio FIFOs of an exec whose creator died (older than the
	// janitor's minute), beside a live one's that a process holds open.
	fifoRoot := t.TempDir()
	fifoDead, fifoHeld := filepath.Join(fifoRoot, "1"), filepath.Join(fifoRoot, "2")
	for _, d := range []string{fifoDead, fifoHeld} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mkfifo(filepath.Join(d, "e-stdout"), 0o600); err != nil {
			t.Fatal(err)
		}
		long := time.Now().Add(-2 * time.Minute)
		if err := os.Chtimes(d, long, long); err != nil {
			t.Fatal(err)
		}
	}
	heldFIFO, err := os.OpenFile(filepath.Join(fifoHeld, "e-stdout"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer heldFIFO.Close()

	// A shim socket nothing listens on (a shim start abandoned after it
	// made the socket), older than the janitor's minute, beside a live one.
	sockDir := t.TempDir()
	staleSock, liveSock := filepath.Join(sockDir, "stale"), filepath.Join(sockDir, "live")
	sln, err := net.ListenUnix("unix", &net.UnixAddr{Name: staleSock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	sln.SetUnlinkOnClose(false)
	sln.Close()
	lln, err := net.Listen("unix", liveSock)
	if err != nil {
		t.Fatal(err)
	}
	defer lln.Close()
	for _, p := range []string{staleSock, liveSock} {
		long := time.Now().Add(-2 * time.Minute)
		if err := os.Chtimes(p, long, long); err != nil {
			t.Fatal(err)
		}
	}

	time.Sleep(1500 * time.Millisecond) // gc-life is past its second
	args := []string{"gc", "--containerd", e.Socket(), "--state-dir", st.Dir, "--volume-dir", vols, "--fifo-dir", fifoRoot, "--shim-socket-dir", sockDir, "--min-age", "0", "--grace", "2s"}
	want := []string{
		fmt.Sprintf("%d (gvx-sentry)", orphan),
		fmt.Sprintf("shim %d (task %s/gc-shim)", shim, testNS),
		"sandbox " + testNS + "/gc-life",
		"pool sandbox " + filepath.Base(poolSandboxes[0]), "pool sandbox " + filepath.Base(poolSandboxes[1]),
		"loop device " + loop + " on " + vol,
		"volume clone " + filepath.Join(vols, ".data-gc-gone.ext4"),
		"mount " + mnt, "state dir " + mnt,
		"state dir " + st.Volumes(testNS, "gc-gone"), "state dir " + st.SentryRoot("gc-gone"),
		"state dir " + st.SentryRoot("gc-orphan"),
		"cgroup " + cgroup, "cgroup /" + testNS + "/gc-orphan",
		"lease gvx-pool-gctest",
		"fifo " + fifoDead,
		"shim socket " + staleSock,
	}

	before := snapshot(e)
	dry := gvx(t, append(args, "--dry-run")...)
	t.Logf("gvx gc --dry-run:\n%s", dry)
	for _, w := range want {
		if !hasLine(dry, "would reclaim ", w) {
			t.Errorf("dry run does not report %q", w)
		}
	}
	if after := snapshot(e); !reflect.DeepEqual(before, after) {
		t.Errorf("the dry run changed the host:\n  %s\n  %s", strings.Join(leaked(before, after), "\n  "), strings.Join(leaked(after, before), "\n  "))
	}
	if !procfs.Alive(orphan) || !procfs.Alive(shim) {
		t.Error("the dry run killed a process")
	}
	if _, err := c.LeasesService().List(ctx, `id=="gvx-pool-gctest"`); err != nil {
		t.Error(err)
	}

	r, err := e.run(context.Background(), "", filepath.Join(e.gvxBin, "gvx"), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gvx gc (exit %d):\n%s%s", r.code, r.stdout, r.stderr)
	if r.code != 0 {
		t.Errorf("gvx gc exited %d", r.code)
	}
	for _, w := range want {
		if !hasLine(r.stdout, "reclaimed ", w) {
			t.Errorf("gvx gc does not report reclaiming %q", w)
		}
	}
	if !strings.Contains(r.stdout, "reclaimed sandbox "+testNS+"/gc-life (running") {
		t.Error("the expired sandbox's report does not say how long it ran")
	}
	for _, pid := range []int{orphan, shim} {
		if procfs.Alive(pid) {
			t.Errorf("process %d still runs after gvx gc", pid)
		}
	}
	if ls, _ := c.LeasesService().List(ctx, `id=="gvx-pool-gctest"`); len(ls) != 0 {
		t.Error("the lease is still there")
	}
	if _, err := os.Stat(filepath.Join(vols, ".data-gc-gone.ext4")); err == nil {
		t.Error("the clone is still there")
	}
	if _, err := os.Stat(vol); err != nil {
		t.Errorf("the volume itself went: %v", err)
	}
	if _, err := os.Stat(fifoDead); err == nil {
		t.Error("the dead exec's FIFOs are still there")
	}
	if _, err := os.Stat(filepath.Join(fifoHeld, "e-stdout")); err != nil {
		t.Errorf("the held FIFO went: %v", err)
	}
	if _, err := os.Lstat(staleSock); err == nil {
		t.Error("the stale shim socket is still there")
	}
	if _, err := os.Lstat(liveSock); err != nil {
		t.Errorf("the live shim socket went: %v", err)
	}

	// containerd's own cleanup after the shims gvx gc stopped runs
	// asynchronously; then a second sweep finds nothing.
	waitGone(t, "gc-shim")
	_, _ = e.ctrResult(context.Background(), "task", "rm", "-f", "gc-shim")
	again := gvx(t, args...)
	if !strings.Contains(again, "gvx gc: reclaimed 0,") {
		t.Errorf("a second sweep found more:\n%s", again)
	}
}

// hasLine: a line of out starts with prefix and has w.
func hasLine(out, prefix, w string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) && strings.Contains(l, w) {
			return true
		}
	}
	return false
}

// cgroupHierarchies are the cgroup mounts pool sandboxes get a cgroup in.
func cgroupHierarchies() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	var out []string
	for _, c := range []string{"memory", "pids", "cpu,cpuacct", "cpuset", "devices", "freezer", "blkio"} {
		if st, err := os.Stat(filepath.Join("/sys/fs/cgroup", c)); err == nil && st.IsDir() {
			out = append(out, filepath.Join("/sys/fs/cgroup", c))
		}
	}
	return out
}
