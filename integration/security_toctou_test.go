package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/internal/testfs"
)

func debugfs(t *testing.T, img string, cmds ...string) {
	t.Helper()
	for _, c := range cmds {
		if out, err := exec.Command("debugfs", "-w", "-R", c, img).CombinedOutput(); err != nil {
			t.Fatalf("debugfs %q %s: %v %s", c, img, err, out)
		}
	}
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestSecurityVolumeSwapRace: the check-to-mount window. While 16 tasks
// start with the volume vol.ext4, a racer swaps (renameat2
// RENAME_EXCHANGE) that path with another image every 100 µs: a valid
// image holding /which = good, and one the check refuses (a superblock
// marked not clean) but the host kernel would mount, holding /which =
// bad. The racer reaches both sides of the check (some tasks are refused,
// some run), yet no task ever sees the refused image: gvx-sentry mounts
// the descriptor the shim checked, not the path, and the refused image's
// superblock shows no mount.
//
// Images someone other than root may write are refused outright: their
// owner could change them after the check (or under the mount), which no
// descriptor closes.
func TestSecurityVolumeSwapRace(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir := volumeDir(t)
	good, bad := filepath.Join(dir, "vol.ext4"), filepath.Join(dir, "other.ext4")
	which := filepath.Join(dir, "which")
	gvx(t, "volume", "create", "--size", "16M", good)
	if err := exec.Command("cp", "--sparse=always", good, bad).Run(); err != nil {
		t.Fatal(err)
	}
	for img, w := range map[string]string{good: "good", bad: "bad"} {
		if err := os.WriteFile(which, []byte(w+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		debugfs(t, img, "write "+which+" which")
	}
	debugfs(t, bad, "ssv state 0")
	badIno := inode(t, bad)
	mt, mc := superblockMountState(t, bad)

	// Owned by another user, or writable by others: refused, naming why.
	for _, c := range []struct {
		name string
		prep func(string) error
		want string
	}{
		{"owned by uid 1000", func(p string) error { return os.Chown(p, 1000, 1000) }, "owned by uid 1000"},
		{"world-writable", func(p string) error { return os.Chmod(p, 0o646) }, "writable by everyone"},
	} {
		p := filepath.Join(dir, "perm.ext4")
		os.Remove(p)
		gvx(t, "volume", "create", "--size", "16M", p)
		if err := c.prep(p); err != nil {
			t.Fatal(err)
		}
		id := "sec-perm"
		cleanupTask(t, id)
		r, err := e.ctrResult(context.Background(), append(append([]string{"run", "--rm", "--runtime", runtime}, volMount(p, "/data")...), busybox, id, "echo", "MOUNTED")...)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = e.ctrResult(context.Background(), "container", "rm", id)
		if r.code == 0 || strings.Contains(r.stdout, "MOUNTED") || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "chown root") {
			t.Errorf("%s: exit %d %q %q; want it refused naming %q and the fix", c.name, r.code, r.stdout, r.stderr, c.want)
		}
		if l := testfs.LoopsUnder(p); len(l) > 0 {
			t.Errorf("%s: loop device attached: %v", c.name, l)
		}
	}

	var swaps atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, good, unix.AT_FDCWD, bad, unix.RENAME_EXCHANGE); err == nil {
				swaps.Add(1)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	var sawGood, refused, sawBad int
	for i := 0; i < 16; i++ {
		id := fmt.Sprintf("sec-swap%d", i)
		cleanupTask(t, id)
		r, err := e.ctrResult(context.Background(), append(append([]string{"run", "--rm", "--runtime", runtime}, volMount(good, "/data")...), busybox, id, "cat", "/data/which")...)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = e.ctrResult(context.Background(), "container", "rm", id)
		switch {
		case strings.Contains(r.stdout, "bad"):
			sawBad++
			t.Errorf("task %s mounted the image the check refused: %q", id, r.stdout)
		case r.code == 0 && strings.Contains(r.stdout, "good"):
			sawGood++
		case strings.Contains(r.stderr, "is not clean"):
			refused++
		default:
			t.Errorf("task %s: exit %d %q %q", id, r.code, r.stdout, r.stderr)
		}
	}
	close(stop)
	<-done
	t.Logf("swap race: %d swaps during 16 task starts; %d ran on the checked image, %d were refused (the path named the dirty image at the check), %d mounted the swapped-in image",
		swaps.Load(), sawGood, refused, sawBad)
	if swaps.Load() < 100 || sawGood == 0 || refused == 0 {
		t.Errorf("the race did not reach both sides of the check (%d swaps, %d ran, %d refused)", swaps.Load(), sawGood, refused)
	}
	badNow := bad
	if inode(t, good) == badIno {
		badNow = good
	}
	if mt2, mc2 := superblockMountState(t, badNow); mt2 != mt || mc2 != mc {
		t.Errorf("the refused image's superblock mount time/count %d/%d → %d/%d: the host kernel mounted it", mt, mc, mt2, mc2)
	}
}

// TestSecuritySnapshotterRootfs: a container's root filesystem from the
// ext4lite snapshotter (an ext4 image built from the image's layers) is
// checked like a volume before the host kernel mounts it: crafted after
// the container was created (a group descriptor pointing outside the
// image, or a superblock feature the check refuses), its task is refused
// naming the image and the problem, and nothing is mounted: no loop
// device, the image byte-identical, its superblock's mount time and count
// unchanged. An unchanged container's root filesystem runs (its image is
// a clone of a layer the snapshotter verified and marked at commit).
func TestSecuritySnapshotterRootfs(t *testing.T) {
	x := newSnapEnv(t)
	x.mustCtr(t, "images", "import", "--local", "--snapshotter", snapName, filepath.Join(e.images, "busybox.tar"))
	t.Cleanup(func() { x.ctr(t, "images", "rm", "--sync", busybox) })
	checkNoLeaks(t)
	x.removeContainer(t, "rootfs-ok")
	t0 := time.Now()
	if out := x.mustCtr(t, "run", "--rm", "--snapshotter", snapName, "--runtime", runtime, busybox, "rootfs-ok", "echo", "rootfs-ran"); !strings.Contains(out, "rootfs-ran") {
		t.Fatalf("a clean snapshotter root filesystem: %q", out)
	}
	t.Logf("a container on a verified (marked) snapshotter root filesystem ran in %v", time.Since(t0).Round(time.Millisecond))
	for i, c := range []struct{ name, debugfs, want string }{
		{"group descriptor", "set_bg 0 inode_table 0x7fffffff", "group 0: inode table"},
		{"unsupported feature", "feature mmp", "mmp"},
	} {
		id := fmt.Sprintf("rootfs-bad%d", i)
		x.removeContainer(t, id)
		x.mustCtr(t, "container", "create", "--snapshotter", snapName, "--runtime", runtime, busybox, id, "echo", "MOUNTED")
		img := x.topSnapshotImage(t, id)
		debugfs(t, img, c.debugfs)
		before := sha(t, img)
		mt, mc := superblockMountState(t, img)
		r := x.ctr(t, "task", "start", id)
		if r.code == 0 || strings.Contains(r.stdout, "MOUNTED") {
			t.Errorf("%s: the task ran on the crafted root filesystem (exit %d, %q)", c.name, r.code, r.stdout)
		}
		if !strings.Contains(r.stderr, img) || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "root filesystem") {
			t.Errorf("%s: error %q does not name the root filesystem's image and %q", c.name, r.stderr, c.want)
		}
		if l := testfs.LoopsUnder(img); len(l) > 0 {
			t.Errorf("%s: loop device attached to the crafted image: %v", c.name, l)
		}
		if sha(t, img) != before {
			t.Errorf("%s: the crafted image changed (was it mounted?)", c.name)
		}
		if mt2, mc2 := superblockMountState(t, img); mt2 != mt || mc2 != mc {
			t.Errorf("%s: superblock mount time/count %d/%d → %d/%d: it was mounted", c.name, mt, mc, mt2, mc2)
		}
		t.Logf("%s: refused: %s", c.name, strings.TrimSpace(r.stderr))
	}
}
