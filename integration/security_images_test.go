package integration

import (
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/internal/testfs"
)

// superblockMountState is what a kernel mount of an ext4 image changes in
// its superblock: the last mount time and the mount count.
func superblockMountState(t *testing.T, img string) (mtime uint32, count uint16) {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1024)
	if _, err := f.ReadAt(b, 1024); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[0x2C:]), binary.LittleEndian.Uint16(b[0x34:])
}

// TestSecurityCraftedVolumes: crafted ext4 images (made here from a valid
// one with debugfs, which keeps every checksum right) passed as volumes to
// a task through containerd are refused with an error naming the image
// and the problem, and never reach the host kernel: no loop device, the
// file byte-identical, its superblock's mount time and count unchanged.
// The valid image runs.
func TestSecurityCraftedVolumes(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir := volumeDir(t)
	valid := filepath.Join(dir, "valid.ext4")
	gvx(t, "volume", "create", "--size", "64M", valid)
	cleanupTask(t, "crafted-ok")
	args := append([]string{"run", "--rm", "--runtime", runtime}, volMount(valid, "/data")...)
	if out := mustCtr(t, append(args, busybox, "crafted-ok", "sh", "-c", "echo ok > /data/f && cat /data/f")...); !strings.Contains(out, "ok") {
		t.Fatalf("valid volume: %q", out)
	}
	cases := []struct {
		name, debugfs, want string
		truncate            int64
	}{
		{name: "external journal", debugfs: "ssv journal_dev 0x801", want: "external journals"},
		{name: "unsupported feature", debugfs: "feature mmp", want: "mmp"},
		{name: "huge inode count", debugfs: "ssv inodes_count 4294967295", want: "inodes per group"},
		{name: "group descriptor", debugfs: "set_bg 0 inode_table 0x7fffffff", want: "group 0: inode table"},
		{name: "journal outside", debugfs: "sif <8> block[5] 0x7fffffff", want: "journal inode: extent"},
		{name: "fsck only", debugfs: "sif <2> links_count 0", want: "e2fsck -fn exit"},
		{name: "truncated", truncate: 40 << 20, want: "truncated"},
	}
	tried := 0
	for i, c := range cases {
		img := filepath.Join(dir, "crafted.ext4")
		os.Remove(img)
		if out, err := exec.Command("cp", "--sparse=always", valid, img).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		if c.debugfs != "" {
			if out, err := exec.Command("debugfs", "-w", "-R", c.debugfs, img).CombinedOutput(); err != nil || strings.Contains(string(out), "debugfs: ") && strings.Contains(string(out), "rror") {
				t.Fatalf("%s: debugfs %q: %v %s", c.name, c.debugfs, err, out)
			}
		}
		if c.truncate > 0 {
			if err := os.Truncate(img, c.truncate); err != nil {
				t.Fatal(err)
			}
		}
		before := sha(t, img)
		mt, mc := superblockMountState(t, img)
		id := "crafted-" + string(rune('a'+i))
		args := append([]string{"run", "--rm", "--runtime", runtime}, volMount(img, "/data")...)
		r, err := e.ctrResult(context.Background(), append(args, busybox, id, "echo", "MOUNTED")...)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = e.ctrResult(context.Background(), "container", "rm", id)
		tried++
		if r.code == 0 || strings.Contains(r.stdout, "MOUNTED") {
			t.Errorf("%s: the task ran (exit %d, %q)", c.name, r.code, r.stdout)
			continue
		}
		if !strings.Contains(r.stderr, img) || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: error %q does not name the image and %q", c.name, r.stderr, c.want)
		}
		if l := testfs.LoopsUnder(img); len(l) > 0 {
			t.Errorf("%s: loop device attached to the crafted image: %v", c.name, l)
		}
		if after := sha(t, img); after != before {
			t.Errorf("%s: the crafted image changed (was it mounted?)", c.name)
		}
		if mt2, mc2 := superblockMountState(t, img); mt2 != mt || mc2 != mc {
			t.Errorf("%s: superblock mount time/count %d/%d → %d/%d: it was mounted", c.name, mt, mc, mt2, mc2)
		}
		t.Logf("%s: refused: %s", c.name, strings.TrimSpace(r.stderr))
	}
	t.Logf("crafted volumes through containerd: %d tried, 0 mounted", tried)
}

// TestSecurityMountSymlinks: CVE-2021-30465-style mount destinations
// through symlinks. A volume holds symlinks (to an absolute host-looking
// path, and ../ out of the volume) and the spec bind-mounts a host
// directory at destinations below them. Whatever the runtime does with the
// task, the symlinks resolve inside the guest: the host directories they
// name get no mount and no file, and the host mount table is unchanged.
func TestSecurityMountSymlinks(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir := volumeDir(t)
	target := filepath.Join(dir, "host-target")
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "payload"), []byte("payload"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "links.ext4")
	gvx(t, "volume", "create", "--size", "16M", img)
	for _, cmd := range []string{"symlink abs " + target, "symlink up ../../../../../../.." + target, "mkdir real"} {
		if out, err := exec.Command("debugfs", "-w", "-R", cmd, img).CombinedOutput(); err != nil {
			t.Fatalf("debugfs %q: %v %s", cmd, err, out)
		}
	}
	host := snapshotHost(t)
	for i, dst := range []string{"/data/abs/m", "/data/up/m", "/data/abs", "/data/up"} {
		id := "sec-link-" + string(rune('a'+i))
		cleanupTask(t, id)
		args := append([]string{"run", "--rm", "--runtime", runtime}, volMount(img, "/data")...)
		args = append(args, "--mount", "type=bind,src="+src+",dst="+dst+",options=rbind:ro", busybox, id,
			"sh", "-c", "echo link=$(readlink /data/abs) up=$(readlink /data/up); ls "+dst+" && echo listed; touch "+dst+"/written 2>&1; echo tried")
		r, err := e.ctrResult(context.Background(), args...)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("destination %s: exit %d\n%s%s", dst, r.code, r.stdout, r.stderr)
		if r.code == 0 {
			attackRan(t, "mount through a symlink "+dst, r.stdout, "link="+target, "tried")
		} else if !strings.Contains(r.stderr, "symlink") && !strings.Contains(r.stderr, dst) && !strings.Contains(r.stderr, "mount") {
			t.Errorf("destination %s refused without naming it: %q", dst, r.stderr)
		}
		ents, err := os.ReadDir(target)
		if err != nil || len(ents) != 0 {
			t.Errorf("destination %s: the host directory the symlink names has %v (%v)", dst, ents, err)
		}
		if m := hostMounts(t); strings.Contains(m, target) {
			t.Errorf("destination %s: a mount appeared on the host at %s", dst, target)
		}
	}
	checkHostUnchanged(t, "mount-destination symlinks", host)
}
