package harness

import (
	"fmt"
	"os"
	"path/filepath"
)

// CgroupDirs are the directories of cgroup p on every v1 hierarchy, or
// its one v2 directory.
func CgroupDirs(p string) []string {
	files, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	var out []string
	for _, f := range files {
		out = append(out, filepath.Join(filepath.Dir(f), p))
	}
	if len(out) == 0 {
		out = []string{filepath.Join("/sys/fs/cgroup", p)}
	}
	return out
}

// MakeCgroup makes cgroup p (its parents too) wherever it can be, as the
// kubelet makes a pod's cgroup (cgroupfs driver).
func MakeCgroup(p string) error {
	for _, d := range CgroupDirs(p) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", p, err)
		}
	}
	return nil
}

// RemoveCgroup removes cgroup p wherever it is (an rmdir: the kernel
// refuses while it has processes or cgroups).
func RemoveCgroup(p string) {
	for _, d := range CgroupDirs(p) {
		_ = os.Remove(d)
	}
}
