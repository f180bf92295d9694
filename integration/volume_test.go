package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/internal/testfs"
)

// loopFS makes a 2 GiB filesystem of the given kind (xfs: reflink; ext4:
// none), loop-mounted in the host's mount namespace (the shim and the
// sandboxes must see it), reachable by the sandbox's unprivileged uid.
func loopFS(t *testing.T, kind string) string {
	t.Helper()
	mnt := testfs.LoopFS(t, kind, "2G")
	for _, d := range []string{filepath.Dir(filepath.Dir(mnt)), filepath.Dir(mnt)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return mnt
}

// volumeDir is a temporary directory for volume images that the sandbox's
// unprivileged host uid can traverse.
func volumeDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func gvx(t *testing.T, args ...string) string {
	t.Helper()
	r, err := e.run(context.Background(), "", filepath.Join(e.gvxBin, "gvx"), args...)
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 0 {
		t.Fatalf("gvx %s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

func sha(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// readInImage reads a file from an ext4 image without mounting it.
func readInImage(t *testing.T, img, path string) (string, bool) {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "cat "+path, img).Output()
	if err != nil {
		t.Fatalf("debugfs cat %s in %s: %v", path, img, err)
	}
	ls, _ := exec.Command("debugfs", "-R", "stat "+path, img).CombinedOutput()
	return string(out), !strings.Contains(string(ls), "File not found")
}

func fsckClean(t *testing.T, img string) {
	t.Helper()
	if out, err := exec.Command("e2fsck", "-fn", img).CombinedOutput(); err != nil {
		t.Errorf("e2fsck -fn %s: %v\n%s", img, err, out)
	}
}

func volMount(img, dst string) []string {
	return []string{"--mount", fmt.Sprintf("type=ext4,src=%s,dst=%s,options=rw", img, dst)}
}

// TestVolumeGoldenClones: a golden volume filled by one sandbox, cloned
// twice (reflink on XFS, sparse copy on ext4), two sandboxes diverge
// independently, the golden image is unchanged, every image is clean.
func TestVolumeGoldenClones(t *testing.T) {
	requireEnv(t)
	for _, tc := range []struct{ fs, method string }{{"xfs", "reflink"}, {"ext4", "sparse"}} {
		t.Run(tc.fs, func(t *testing.T) {
			dir := loopFS(t, tc.fs)
			checkNoLeaks(t)
			golden := filepath.Join(dir, "golden.ext4")
			gvx(t, "volume", "create", "--size", "256M", golden)
			args := append([]string{"run", "--rm", "--runtime", runtime}, volMount(golden, "/var/lib/docker")...)
			mustCtr(t, append(args, busybox, "seed", "sh", "-c", "echo seed-data > /var/lib/docker/seed && mkdir /var/lib/docker/d && chmod 700 /var/lib/docker/d")...)
			fsckClean(t, golden)
			sum := sha(t, golden)

			eps := []string{filepath.Join(dir, "ep1.ext4"), filepath.Join(dir, "ep2.ext4")}
			for _, ep := range eps {
				out := gvx(t, "volume", "clone", golden, ep)
				if !strings.Contains(out, tc.method) {
					t.Errorf("clone on %s: %q, want method %s", tc.fs, out, tc.method)
				}
			}
			// Two episodes at once, each writing its own file.
			for i, ep := range eps {
				id := fmt.Sprintf("ep%d", i+1)
				cleanupTask(t, id)
				args := append([]string{"run", "-d", "--runtime", runtime}, volMount(ep, "/var/lib/docker")...)
				mustCtr(t, append(args, busybox, id, "sh", "-c",
					fmt.Sprintf("cat /var/lib/docker/seed > /var/lib/docker/%s && ls -ln /var/lib/docker > /var/lib/docker/%s.ls && sleep 600", id, id))...)
			}
			for i := range eps {
				id := fmt.Sprintf("ep%d", i+1)
				r, err := e.ctrResult(context.Background(), "task", "exec", "--exec-id", "w", id, "sh", "-c", "sync; test -s /var/lib/docker/"+id)
				if err != nil || r.code != 0 {
					t.Fatalf("%s did not write its file: %v %s", id, err, r.stderr)
				}
				mustCtr(t, "task", "kill", "-s", "KILL", id)
				waitStatus(t, id, "STOPPED")
				mustCtr(t, "task", "rm", id)
				mustCtr(t, "container", "rm", id)
			}
			for i, ep := range eps {
				me, other := fmt.Sprintf("ep%d", i+1), fmt.Sprintf("ep%d", 2-i)
				if got, ok := readInImage(t, ep, "/"+me); !ok || strings.TrimSpace(got) != "seed-data" {
					t.Errorf("%s: /%s = %q (exists %v), want the seed data copied by its sandbox", ep, me, got, ok)
				}
				if _, ok := readInImage(t, ep, "/"+other); ok {
					t.Errorf("%s contains /%s written by the other episode", ep, other)
				}
				if ls, _ := readInImage(t, ep, "/"+me+".ls"); !strings.Contains(ls, " 0        0 ") {
					t.Errorf("guest did not see the volume's files as its root's:\n%s", ls)
				}
				fsckClean(t, ep)
			}
			if got := sha(t, golden); got != sum {
				t.Errorf("golden image changed: %s → %s", sum, got)
			}
		})
	}
}

// TestVolumeExclusiveAndErrors: an image in use is refused to a second
// sandbox; bad images are refused with a clear error before any mount.
func TestVolumeExclusiveAndErrors(t *testing.T) {
	requireEnv(t)
	dir := volumeDir(t)
	checkNoLeaks(t)
	img := filepath.Join(dir, "v.ext4")
	gvx(t, "volume", "create", "--size", "32M", img)
	cleanupTask(t, "holder")
	args := append([]string{"run", "-d", "--runtime", runtime}, volMount(img, "/data")...)
	mustCtr(t, append(args, busybox, "holder", "sleep", "600")...)

	// The image is mounted (a loop device backs it) but only inside the
	// sandbox: the host's mount table shows neither the staging directory
	// nor that loop device.
	loops := testfs.LoopsUnder(img)
	if len(loops) != 1 {
		t.Fatalf("loop devices on %s while in use: %v, want one", img, loops)
	}
	dev := "/dev/" + strings.Fields(loops[0])[0]
	if m := harness.MountsUnder(harness.State.VolumesDir() + "/"); len(m) > 0 {
		t.Errorf("volume staging mounted on the host: %v", m)
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Contains(string(data), " "+dev+" ") {
		t.Errorf("host mount table shows %s (%v)", dev, err)
	}

	second := append([]string{"run", "--rm", "--runtime", runtime}, volMount(img, "/data")...)
	r, err := e.ctrResult(context.Background(), append(second, busybox, "second", "true")...)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = e.ctrResult(context.Background(), "container", "rm", "second")
	if r.code == 0 || !strings.Contains(r.stderr, "in use by another sandbox") {
		t.Errorf("second user of %s: exit %d, %q; want a clear in-use error", img, r.code, r.stderr)
	}

	garbage := filepath.Join(dir, "garbage.ext4")
	if err := os.WriteFile(garbage, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	dirty := filepath.Join(dir, "dirty.ext4")
	gvx(t, "volume", "create", "--size", "16M", dirty)
	if out, err := exec.Command("debugfs", "-w", "-R", "ssv state 0", dirty).CombinedOutput(); err != nil {
		t.Fatalf("debugfs: %v %s", err, out)
	}
	for _, tc := range []struct{ img, want string }{
		{garbage, "not an ext4 image"},
		{dirty, "not clean"},
		{filepath.Join(dir, "absent.ext4"), "absent.ext4"},
	} {
		args := append([]string{"run", "--rm", "--runtime", runtime}, volMount(tc.img, "/data")...)
		r, err := e.ctrResult(context.Background(), append(args, busybox, "bad", "true")...)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = e.ctrResult(context.Background(), "container", "rm", "bad")
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("volume %s: exit %d, %q; want an error mentioning %q", tc.img, r.code, r.stderr, tc.want)
		}
	}
}

// TestVolumeFull: a full volume gives ENOSPC inside the sandbox only.
func TestVolumeFull(t *testing.T) {
	requireEnv(t)
	dir := volumeDir(t)
	checkNoLeaks(t)
	img := filepath.Join(dir, "small.ext4")
	gvx(t, "volume", "create", "--size", "16M", img)
	var before syscall.Statfs_t
	if err := syscall.Statfs(dir, &before); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run", "--rm", "--runtime", runtime}, volMount(img, "/data")...)
	r, err := e.ctrResult(context.Background(), append(args, busybox, "full", "sh", "-c", "dd if=/dev/zero of=/data/big bs=1M count=64; echo dd-exit=$?")...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.stderr, "No space left on device") || strings.Contains(r.stdout, "dd-exit=0") {
		t.Errorf("dd into a 16 MiB volume: stdout %q stderr %q; want ENOSPC", r.stdout, r.stderr)
	}
	st, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 16<<20 {
		t.Errorf("image grew on the host: %d bytes", st.Size())
	}
	fsckClean(t, img)
}

// TestVolumeNerdctl: `nerdctl run -v IMG:/var/lib/docker`, a bind mount
// whose source is an ext4 image, becomes a volume.
func TestVolumeNerdctl(t *testing.T) {
	requireEnv(t)
	dir := volumeDir(t)
	checkNoLeaks(t)
	img := filepath.Join(dir, "n.ext4")
	gvx(t, "volume", "create", "--size", "32M", img)
	out := mustNerdctl(t, "run", "--runtime", runtime, "--rm", "--net", "none", "-v", img+":/var/lib/docker", busybox,
		"sh", "-c", "echo from-nerdctl > /var/lib/docker/n && df -k /var/lib/docker | tail -1")
	if f := strings.Fields(out); len(f) < 2 || f[1] == "" {
		t.Errorf("df in sandbox: %q", out)
	}
	if got, ok := readInImage(t, img, "/n"); !ok || strings.TrimSpace(got) != "from-nerdctl" {
		t.Errorf("file written through nerdctl -v: %q (exists %v)", got, ok)
	}
	fsckClean(t, img)
}

// TestVolumeKill: kill -9 of the sandbox, then of a shim, with a volume
// mounted: no mount, loop device, lock or process remains, and the image
// can be leased again.
func TestVolumeKill(t *testing.T) {
	requireEnv(t)
	dir := volumeDir(t)
	checkNoLeaks(t)
	img := filepath.Join(dir, "k.ext4")
	gvx(t, "volume", "create", "--size", "32M", img)
	args := append([]string{"run", "-d", "--runtime", runtime}, volMount(img, "/data")...)

	cleanupTask(t, "vk1")
	mustCtr(t, append(args, busybox, "vk1", "sh", "-c", "echo x > /data/x; sleep 600")...)
	// A kill -9 loses what the guest has not synced (gVisor caches the
	// exclusive volume's writes), as power loss would: sync first.
	for i := 0; ; i++ {
		r, err := e.ctrResult(context.Background(), "task", "exec", "--exec-id", fmt.Sprintf("s%d", i), "vk1", "sh", "-c", "test -s /data/x && sync")
		if err == nil && r.code == 0 {
			break
		}
		if i == 50 {
			t.Fatalf("vk1 never wrote /data/x: %v %s", err, r.stderr)
		}
		sleepShort()
	}
	if err := syscall.Kill(taskPid(t, "vk1"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, "vk1", "STOPPED")
	mustCtr(t, "task", "rm", "vk1")
	mustCtr(t, "container", "rm", "vk1")

	cleanupTask(t, "vk2")
	mustCtr(t, append(args, busybox, "vk2", "sleep", "600")...)
	if err := syscall.Kill(shimPid(t, "vk2"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "vk2")
	_, _ = e.ctrResult(context.Background(), "task", "rm", "-f", "vk2")
	mustCtr(t, "container", "rm", "vk2")

	// The lease is free again: a new sandbox can use the image.
	again := append([]string{"run", "--rm", "--runtime", runtime}, volMount(img, "/data")...)
	if out := mustCtr(t, append(again, busybox, "vk3", "cat", "/data/x")...); strings.TrimSpace(out) != "x" {
		t.Errorf("reading the volume after the kills: %q", out)
	}
}

// waitGone waits until containerd no longer lists task id as running.
func waitGone(t *testing.T, id string) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if s := taskStatus(t, id); s == "" || s == "STOPPED" {
			return
		}
		sleepShort()
	}
	t.Fatalf("task %s still running after its shim died", id)
}
