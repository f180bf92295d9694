// Package admission refuses new sandboxes while the node is short of
// memory or disk.
//
// The shim checks it at every create of a sandbox (its own or a pool's
// adopted one; a container joining a running pod's sandbox is not a new
// sandbox), before it sets anything up, and refuses with containerd's
// ResourceExhausted and a message naming the resource, its use, the
// threshold and the fix.
package admission

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/config"
)

// Check returns an error if a threshold of a is crossed now; stateDir
// stands for the disk when a names no paths.
func Check(a config.Admission, stateDir string) error {
	if a.MemoryPercent > 0 {
		used, err := memoryUsed()
		if err != nil {
			return fmt.Errorf("admission: read memory use: %w", err)
		}
		if used > a.MemoryPercent {
			return fmt.Errorf("node memory is %.1f%% used, above admission.memory_percent = %g: new sandboxes are refused until memory frees up (stop sandboxes, or raise the threshold in the gvx config)", used, a.MemoryPercent)
		}
	}
	if a.DiskPercent > 0 {
		paths := a.DiskPaths
		if len(paths) == 0 {
			paths = []string{stateDir}
		}
		for _, p := range paths {
			used, err := diskUsed(p)
			if err != nil {
				return fmt.Errorf("admission: disk use of %s: %w (fix admission.disk_paths)", p, err)
			}
			if used > a.DiskPercent {
				return fmt.Errorf("the file system of %s is %.1f%% used, above admission.disk_percent = %g: new sandboxes are refused until space frees up (remove volumes or images, or raise the threshold in the gvx config)", p, used, a.DiskPercent)
			}
		}
	}
	return nil
}

// memoryUsed is the share of the node's memory not available, in percent.
func memoryUsed() (float64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total, avail float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "MemTotal:":
			total = v
		case "MemAvailable:":
			avail = v
		}
	}
	if total == 0 {
		return 0, fmt.Errorf("no MemTotal in /proc/meminfo")
	}
	return 100 * (1 - avail/total), nil
}

// diskUsed is the share of path's file system in use, in percent.
func diskUsed(path string) (float64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	if st.Blocks == 0 {
		return 0, nil
	}
	return 100 * (1 - float64(st.Bavail)/float64(st.Blocks)), nil
}
