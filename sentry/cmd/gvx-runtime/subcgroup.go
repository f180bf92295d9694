package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A container in a pod (CRI gives each one a cgroup path) has a cgroup of
// its own, which gVisor calls its compat cgroup: made at its create for
// the tools that read a container's usage from its cgroup, removed by its
// destroy once its gofer is gone (runsc/cgroup's Uninstall of it). gvx-
// runtime's delete removes it the same way: the directories gVisor made
// (the JSON says which it owns), each retried while the kernel still says
// EBUSY, for up to gVisor's 5 s. A systemd-managed one (its unit to stop
// over D-Bus) goes to gvx-sentry.

// compatV1 is runsc/cgroup's cgroupV1 as its JSON has it.
type compatV1 struct {
	Name    string            `json:"name"`
	Parents map[string]string `json:"parents"`
	Own     map[string]bool   `json:"own"`
}

// compatV2 is runsc/cgroup's cgroupV2 as its JSON has it: Own are the
// directories it made, outermost first.
type compatV2 struct {
	Own []string `json:"own"`
}

// v1Controllers are the cgroup v1 controllers gVisor makes a container's
// cgroup in (runsc/cgroup's controllers).
var v1Controllers = []string{"blkio", "cpu", "cpuset", "hugetlb", "memory", "net_cls", "net_prio", "pids",
	"cpuacct", "devices", "freezer", "perf_event", "rdma", "systemd"}

// cgroupRmdirWait bounds the retries of a cgroup directory's removal.
const cgroupRmdirWait = 5 * time.Second

// compatDirs lists the directories of compat cgroup cg to remove, innermost
// first; ok is false for a kind gvx-runtime does not remove itself.
func compatDirs(cg map[string]json.RawMessage) (dirs []string, ok bool) {
	for kind, raw := range cg {
		if string(raw) == "null" {
			continue
		}
		switch kind {
		case "cgroupv1":
			var c compatV1
			if err := json.Unmarshal(raw, &c); err != nil || c.Name == "" {
				return nil, false
			}
			root := cgroupRoot()
			for _, ctrl := range v1Controllers {
				if !c.Own[ctrl] {
					continue // the caller's, not gVisor's to remove
				}
				path := c.Name
				if parent, ok := c.Parents[ctrl]; ok {
					path = filepath.Join(parent, c.Name)
				}
				dirs = append(dirs, filepath.Join(root, ctrl, path))
			}
		case "cgroupv2":
			var c compatV2
			if err := json.Unmarshal(raw, &c); err != nil {
				return nil, false
			}
			for i := len(c.Own) - 1; i >= 0; i-- {
				if !filepath.IsAbs(c.Own[i]) {
					return nil, false
				}
				dirs = append(dirs, c.Own[i])
			}
		case "cgroupunknown":
		default:
			return nil, false // systemd's, or a kind this build does not know
		}
	}
	return dirs, true
}

// removeCgroupDirs removes each of dirs, retrying while it is busy.
func removeCgroupDirs(dirs []string) error {
	var errs []error
	deadline := time.Now().Add(cgroupRmdirWait)
	for _, d := range dirs {
		for {
			err := unix.Rmdir(d)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// cgroupRoot is where the cgroup hierarchies are mounted, found as gVisor
// finds it: the first cgroup mount in this process's mount table, or its
// parent when that is one controller's (or the unified hierarchy's)
// directory.
func cgroupRoot() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "/sys/fs/cgroup"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 9 {
			continue
		}
		if fs := fields[len(fields)-3]; fs != "cgroup" && fs != "cgroup2" {
			continue
		}
		mnt := fields[4]
		base := filepath.Base(mnt)
		if base == "unified" || strings.Contains(base, ",") || slices.Contains(v1Controllers, base) {
			return filepath.Dir(mnt)
		}
		return mnt
	}
	return "/sys/fs/cgroup"
}
