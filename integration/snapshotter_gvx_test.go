package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/internal/testfs"
)

// TestSnapshotterGvx: with the ext4lite snapshotter, gvx sandboxes run on
// ext4 root filesystems that are never mounted in the host's mount
// namespace (gvx-sentry mounts them in the sandbox's), writes land in the
// container's own clone, and one container's writes are invisible to
// another's.
func TestSnapshotterGvx(t *testing.T) {
	x := newSnapEnv(t)
	x.mustCtr(t, "images", "import", "--local", "--snapshotter", snapName, filepath.Join(e.images, "busybox.tar"))
	t.Cleanup(func() { x.ctr(t, "images", "rm", "--sync", busybox) })
	checkNoLeaks(t)

	for _, id := range []string{"g1", "g2"} {
		x.removeContainer(t, id)
	}
	run := []string{"run", "-d", "--snapshotter", snapName, "--runtime", runtime, busybox}
	x.mustCtr(t, append(run, "g1", "sh", "-c", "echo written-by-g1 > /mine && sleep 600")...)
	x.mustCtr(t, append(run, "g2", "sleep", "600")...)

	// Nothing of the snapshots is mounted on the host.
	for _, m := range harness.MountsUnder(x.mnt + "/") {
		t.Errorf("snapshot mounted in the host mount namespace: %s", m)
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(data), filepath.Join(x.mnt, "ext4lite")) {
		t.Errorf("host mount table mentions the snapshotter's images")
	}

	r := x.ctr(t, "task", "exec", "--exec-id", "c1", "g1", "sh", "-c", "sync; cat /mine; cat /proc/self/uid_map >/dev/null; ls -ln /etc/shadow")
	if r.code != 0 || !strings.Contains(r.stdout, "written-by-g1") || !strings.Contains(r.stdout, " 0        0 ") {
		t.Errorf("g1 reading its own write / its files' owners: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = x.ctr(t, "task", "exec", "--exec-id", "c2", "g2", "cat", "/mine")
	if r.code == 0 {
		t.Errorf("g2 sees g1's rootfs write: %q", r.stdout)
	}
	// Once g1's sandbox is gone (and with it the only mount of its
	// image), the write is in g1's ext4 clone on disk.
	img := x.topSnapshotImage(t, "g1")
	x.mustCtr(t, "task", "kill", "-s", "KILL", "g1")
	for i := 0; i < 100 && !strings.Contains(x.mustCtr(t, "task", "ls"), "STOPPED"); i++ {
		sleepShort()
	}
	x.mustCtr(t, "task", "rm", "g1")
	if err := waitImageDetached(img); err != nil {
		t.Fatal(err)
	}
	if got, ok := readInImage(t, img, "/mine"); !ok || strings.TrimSpace(got) != "written-by-g1" {
		t.Errorf("g1's snapshot image %s: /mine = %q (exists %v)", img, got, ok)
	}
}

// topSnapshotImage is the ext4 image file behind container id's snapshot
// (its key is the container id), as the snapshotter's Mounts reports it.
func (x *snapEnv) topSnapshotImage(t *testing.T, id string) string {
	t.Helper()
	out := x.mustCtr(t, "snapshots", "--snapshotter", snapName, "mounts", "/mnt", id)
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, x.mnt+"/") {
			return f
		}
	}
	t.Fatalf("no image path in %q", out)
	return ""
}

// waitImageDetached waits until no loop device is backed by img.
func waitImageDetached(img string) error {
	attached := func() bool {
		for _, l := range testfs.LoopsUnder(img) { // a prefix match: "…/2" also finds "…/20"
			if strings.HasSuffix(l, " "+img) {
				return true
			}
		}
		return false
	}
	for i := 0; i < 150; i++ {
		if !attached() {
			return nil
		}
		sleepShort()
	}
	return fmt.Errorf("%s still attached to a loop device 15 s after its sandbox was deleted", img)
}
