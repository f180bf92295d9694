package sandbox

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/flock"
)

// serving reports whether a pool server answers on socket.
func serving(socket string) bool {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// RemovePoolDir removes a pool's directory (its root containers' rootfs
// and image mount included) once no sandbox is left in it and no pool
// server works on it. A server holds the directory's lock
// (api.PoolDir.Lock) from before it sets the directory up (it installs
// gvx-pause in the rootfs) to after its own removal; RemovePoolDir takes
// that lock for the removal, or leaves the directory to the server that
// holds it. (A claimed sandbox's destroy once removed the rootfs of a new
// server that was not answering on its socket yet: "install gvx-pause …:
// no such file or directory".)
func RemovePoolDir(dir api.PoolDir) {
	f, err := os.OpenFile(dir.Lock(), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return // no directory
	}
	defer flock.Close(f)
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return // a server's
	}
	RemovePoolDirLocked(dir)
}

// RemovePoolDirLocked is RemovePoolDir for the server that holds the
// directory's lock. A server waiting for the lock finds the lock file
// gone and starts afresh.
func RemovePoolDirLocked(dir api.PoolDir) {
	entries, err := os.ReadDir(string(dir))
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), api.PoolSandboxPrefix) {
			return
		}
	}
	UnmountImage(dir)
	_ = os.RemoveAll(dir.Rootfs())
	_ = os.Remove(dir.Lock())
	_ = os.Remove(string(dir))
	_ = os.Remove(filepath.Dir(string(dir))) // the pools' directory, once empty
}

// UnmountImage detaches every mount at an image pool's image directory and
// removes it and its upper directory.
func UnmountImage(dir api.PoolDir) {
	for unix.Unmount(dir.Image(), unix.MNT_DETACH) == nil {
	}
	_ = os.Remove(dir.Image())
	_ = os.RemoveAll(dir.ImageUpper())
}

// removeEmptyPoolCgroup removes the cgroup the pool sandboxes boot in
// (/gvx-pool) once no sandbox uses it: a plain rmdir per hierarchy, which
// the kernel refuses while any child cgroup exists (no recursive walk over
// the other sandboxes). A pod's sandbox that moved into its pod's cgroup
// leaves that cgroup's parent to its owner, the kubelet.
func removeEmptyPoolCgroup() {
	parent := "/" + api.PoolCgroupParent
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", parent))
	for _, d := range append(dirs, filepath.Join("/sys/fs/cgroup", parent)) {
		_ = os.Remove(d)
	}
}
