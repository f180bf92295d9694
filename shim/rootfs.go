package shim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/log"
	securejoin "github.com/cyphar/filepath-securejoin"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/oci"
)

// mountRootfs mounts the task's root filesystem at target, idmapped so that
// host root's files belong to the sandbox's root, and creates the mount
// points the spec's bind mounts need (the unprivileged gofer cannot).
func mountRootfs(ctx context.Context, rootfs []mount.Mount, target string, m oci.Mapping, specMounts []specs.Mount) (retErr error) {
	// Parents are traverse-only for everyone: the sandbox's host uid must
	// reach target, nobody needs to list it.
	if err := mkdirInNamespaceDir(target, 0o711); err != nil {
		return fmt.Errorf("create rootfs dir: %w", err)
	}
	if err := checkTraversable(target, m.HostUID); err != nil {
		return err
	}
	mounts := make([]mount.Mount, 0, len(rootfs))
	for _, rm := range rootfs {
		opts := append([]string{}, rm.Options...)
		if rm.Type == "overlay" || rm.Type == "bind" || slices.Contains(opts, "bind") || slices.Contains(opts, "rbind") {
			opts = append(opts, m.IDMapOptions()...)
		}
		rm.Options = opts
		mounts = append(mounts, rm)
	}
	if err := mount.All(mounts, target); err != nil {
		_ = os.Remove(target)
		return fmt.Errorf("mount rootfs (idmapped to host uid %d): %w", m.HostUID, err)
	}
	defer func() {
		if retErr != nil {
			if err := releaseRootfs(target); err != nil {
				log.G(ctx).WithError(err).Warn("gvx shim: undo rootfs mount")
			}
		}
	}()
	for _, sm := range specMounts {
		if !oci.IsBind(sm) {
			continue
		}
		if err := makeMountPoint(target, sm.Destination, sm.Source); err != nil {
			return err
		}
	}
	log.G(ctx).Debugf("gvx shim: rootfs mounted at %s", target)
	return nil
}

// releaseRootfs unmounts a rootfs mounted by mountRootfs (or gvx-sentry's
// mount point of an ext4 root filesystem, which has nothing mounted on the
// host) and removes its mount point, and the namespace directory above it
// once empty.
func releaseRootfs(target string) error {
	if err := mount.UnmountRecursive(target, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount rootfs %s: %w", target, err)
	}
	if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove rootfs mount point %s: %w", target, err)
	}
	_ = os.Remove(filepath.Dir(target)) // the namespace dir, if empty
	return nil
}

// checkTraversable makes sure a process with host uid (and no other
// privilege) can walk down to path, and names the directory that stops it.
func checkTraversable(path string, uid uint32) error {
	for dir := filepath.Dir(filepath.Clean(path)); ; dir = filepath.Dir(dir) {
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			return fmt.Errorf("stat %s: %w", dir, err)
		}
		if st.Mode&0o001 == 0 && !(st.Uid == uid && st.Mode&0o100 != 0) {
			return fmt.Errorf("directory %s (mode %04o) is not traversable by the sandbox's host uid %d: chmod o+x %s, or move gvx's state_dir/the bundle elsewhere", dir, st.Mode&0o7777, uid, dir)
		}
		if dir == "/" {
			return nil
		}
	}
}

func makeMountPoint(rootfs, dest, src string) error {
	p, err := securejoin.SecureJoin(rootfs, dest)
	if err != nil {
		return fmt.Errorf("mount point %s: %w", dest, err)
	}
	if _, err := os.Lstat(p); err == nil {
		return nil
	}
	st, err := os.Stat(src)
	if err == nil && !st.IsDir() {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("mount point %s: %w", dest, err)
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("mount point %s: %w", dest, err)
		}
		return f.Close()
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		return fmt.Errorf("mount point %s: %w", dest, err)
	}
	return nil
}
