package checkpoint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gvxrun/gvx/internal/mountinfo"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/volume"
)

// Mounted is one ext4lite volume of a running sandbox.
type Mounted struct {
	// Image is the image file, Destination where the sandbox mounts it.
	Image, Destination string
	ReadOnly           bool
}

// ioctls that freeze and thaw a filesystem (linux/fs.h).
const (
	fiFreeze = 0xC0045877
	fiThaw   = 0xC0045878
)

// SaveVolumes copies each volume of a paused sandbox into image directory
// dir: it freezes the volume's filesystem, found mounted in the mount
// namespace of one of the sandbox's processes pids (gvx mounts volumes
// only there), clones the image, and thaws it. The caller holds the
// volumes' leases and keeps the sandbox paused.
func SaveVolumes(ctx context.Context, dir string, vols []Mounted, pids []int) ([]Volume, error) {
	var out []Volume
	for i, v := range vols {
		saved := Volume{Destination: v.Destination, ReadOnly: v.ReadOnly}
		if !v.ReadOnly {
			file := filepath.Join(volumesDir, strconv.Itoa(i)+".ext4")
			method, err := saveVolume(ctx, v.Image, filepath.Join(dir, file), pids)
			if err != nil {
				return nil, fmt.Errorf("volume %s at %s: %w", v.Image, v.Destination, err)
			}
			saved.File, saved.Method = file, string(method)
		}
		out = append(out, saved)
	}
	return out, nil
}

func saveVolume(ctx context.Context, image, dst string, pids []int) (_ volume.Method, err error) {
	root, err := findMount(image, pids)
	if err != nil {
		return "", err
	}
	f, err := os.Open(root)
	if err != nil {
		return "", fmt.Errorf("open its filesystem: %w", err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), fiFreeze, 0); err != nil {
		return "", fmt.Errorf("freeze its filesystem: %w", err)
	}
	defer func() {
		if terr := unix.IoctlSetInt(int(f.Fd()), fiThaw, 0); terr != nil && err == nil {
			err = fmt.Errorf("thaw its filesystem: %w", terr)
		}
	}()
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", err
	}
	return volume.Clone(ctx, image, dst, volume.CloneOptions{Held: true})
}

// findMount returns a path, through /proc/<pid>/root, to the root of the
// ext4 filesystem on image as one of pids sees it mounted.
func findMount(image string, pids []int) (string, error) {
	var want unix.Stat_t
	if err := unix.Stat(image, &want); err != nil {
		return "", err
	}
	for _, pid := range pids {
		mp, err := mountOf(pid, &want)
		if err == nil {
			return filepath.Join(fmt.Sprintf("/proc/%d/root", pid), mp), nil
		}
	}
	return "", fmt.Errorf("not mounted in any of the sandbox's processes %v", pids)
}

var errNotMounted = errors.New("not mounted")

// mountOf returns the mount point, as process pid sees it, of an ext4
// filesystem on a loop device backed by image (its device and inode: the
// path the kernel reports of a loop device's file is relative to a mount
// that this process may not see).
func mountOf(pid int, image *unix.Stat_t) (string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - type source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 2 || b[0] != "ext4" || a[3] != "/" || !strings.HasPrefix(b[1], "/dev/loop") {
			continue
		}
		if backedBy(b[1], image) {
			return mountinfo.Unescape(a[4]), nil
		}
	}
	return "", errNotMounted
}

// backedBy reports whether loop device dev is backed by the file image.
func backedBy(dev string, image *unix.Stat_t) bool {
	f, err := os.Open(dev)
	if err != nil {
		return false
	}
	defer f.Close()
	info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
	return err == nil && info.Device == uint64(image.Dev) && info.Inode == image.Ino
}

// RestoreVolume makes the image at dst the volume copy src (of a
// checkpoint), keeping dst's mode and owner: it holds dst's lease
// meanwhile, so a volume a sandbox uses is refused (volume.ErrInUse). A
// dst that does not exist yet is made a clone of src, after src itself
// passed the check every image gets before the host kernel mounts it
// (volume.Verify): src is then marked verified, and so is each clone of
// it, which a lease then takes without checking again — one check per
// checkpoint copy, not one per rollback or fork to it.
func RestoreVolume(ctx context.Context, src, dst string) error {
	if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
		if err := volume.Verify(ctx, src); err != nil {
			return fmt.Errorf("restore volume %s: the checkpoint's copy: %w", dst, err)
		}
		if _, err := volume.Clone(ctx, src, dst, volume.CloneOptions{}); err != nil {
			return fmt.Errorf("restore volume %s: %w", dst, err)
		}
		return nil
	}
	lease, err := volume.Acquire(ctx, dst, volume.AcquireOptions{Force: true})
	if err != nil {
		return fmt.Errorf("restore volume %s: %w", dst, err)
	}
	defer lease.Release()
	st, err := os.Stat(dst)
	if err != nil {
		return fmt.Errorf("restore volume %s: %w", dst, err)
	}
	tmp := dst + ".gvx-restore"
	_ = os.Remove(tmp) // a crashed restore's
	if _, err := volume.Clone(ctx, src, tmp, volume.CloneOptions{}); err != nil {
		return fmt.Errorf("restore volume %s: %w", dst, err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if err := os.Chmod(tmp, st.Mode().Perm()); err == nil {
		err = os.Chown(tmp, int(sys.Uid), int(sys.Gid))
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("restore volume %s: %w", dst, err)
	}
	return nil
}
