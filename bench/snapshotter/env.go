package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/volume"
)

// env is one filesystem under test with the three snapshotters on it.
type env struct {
	dir   string // holds the filesystem image and its mount point
	mnt   string
	serve *exec.Cmd
	ctrd  *harness.Containerd
	sock  string
}

// setup makes and mounts a sparse loop filesystem of type fstype in
// /var/tmp, starts `gvx snapshotter serve` on it and a private
// containerd whose blockfile and overlayfs roots are on it too.
func setup(ctx context.Context, fstype string, size int64) (_ *env, retErr error) {
	bins := harness.BinsFromEnv()
	if bins.GVX == "" || bins.Containerd == "" || os.Getenv("IMAGES") == "" {
		return nil, fmt.Errorf("run through `make bench` (needs GVX_BIN, CONTAINERD_BIN, IMAGES)")
	}
	dir, err := os.MkdirTemp("/var/tmp", "gvx-snapbench-")
	if err != nil {
		return nil, err
	}
	x := &env{dir: dir, mnt: filepath.Join(dir, "mnt")}
	defer func() {
		if retErr != nil {
			x.close()
		}
	}()
	img := filepath.Join(dir, fstype+".img")
	if err := run("truncate", "-s", "200G", img); err != nil {
		return nil, err
	}
	mkfs := []string{"mkfs." + fstype, "-q", img}
	if fstype == "ext4" {
		mkfs = []string{"mkfs.ext4", "-q", "-F", img}
	}
	if err := run(mkfs...); err != nil {
		return nil, err
	}
	if err := os.Mkdir(x.mnt, 0o755); err != nil {
		return nil, err
	}
	if err := run("mount", "-o", "loop", img, x.mnt); err != nil {
		return nil, err
	}
	scratch := filepath.Join(x.mnt, "blockfile-scratch")
	if _, err := volume.Create(ctx, scratch, volume.CreateOptions{Size: size}); err != nil {
		return nil, fmt.Errorf("blockfile scratch: %w", err)
	}
	x.sock = filepath.Join(dir, "ext4lite.sock")
	x.serve = exec.Command(filepath.Join(bins.GVX, "gvx"), "snapshotter", "serve",
		"--root", filepath.Join(x.mnt, "ext4lite"), "--address", x.sock,
		"--default-size", fmt.Sprint(size/1024)+"K", "--log-level", "warn")
	x.serve.Stdout, x.serve.Stderr = os.Stderr, os.Stderr
	if err := x.serve.Start(); err != nil {
		return nil, err
	}
	if err := waitSocket(x.sock, 10*time.Second); err != nil {
		return nil, err
	}
	x.ctrd, err = harness.StartWithConfig(ctx, bins, fmt.Sprintf(`
[proxy_plugins.ext4lite]
  type = "snapshot"
  address = %q
[plugins."io.containerd.snapshotter.v1.blockfile"]
  root_path = %q
  scratch_file = %q
  fs_type = "ext4"
[plugins."io.containerd.snapshotter.v1.overlayfs"]
  root_path = %q
`, x.sock, filepath.Join(x.mnt, "blockfile"), scratch, filepath.Join(x.mnt, "overlayfs")))
	if err != nil {
		return nil, err
	}
	return x, nil
}

// close stops containerd and the snapshotter, unmounts and deletes the
// filesystem.
func (x *env) close() {
	if x.ctrd != nil {
		x.ctrd.Close()
	}
	if x.serve != nil && x.serve.Process != nil {
		_ = x.serve.Process.Signal(syscall.SIGTERM)
		_ = x.serve.Wait()
	}
	if _, err := os.Stat(x.mnt); err == nil {
		for _, m := range harness.MountsUnder(x.mnt + "/") {
			_ = run("umount", m)
		}
		_ = run("umount", "-d", x.mnt)
	}
	_ = os.RemoveAll(x.dir)
}

// used is the space used on the filesystem under test once it has
// settled: after a sync, and after deferred frees of deleted files (XFS
// inactivates unlinked inodes in the background) have stopped changing
// it, for up to 10 s.
func (x *env) used() (int64, error) {
	prev := int64(-1)
	for deadline := time.Now().Add(10 * time.Second); ; {
		syscall.Sync()
		var st syscall.Statfs_t
		if err := syscall.Statfs(x.mnt, &st); err != nil {
			return 0, err
		}
		u := int64(st.Blocks-st.Bfree) * st.Bsize
		if u == prev || time.Now().After(deadline) {
			return u, nil
		}
		prev = u
		time.Sleep(100 * time.Millisecond)
	}
}

func waitSocket(p string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if st, err := os.Stat(p); err == nil && st.Mode()&os.ModeSocket != 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("no socket %s after %s", p, d)
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
