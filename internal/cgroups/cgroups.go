// Package cgroups removes the cgroups gvx's sandboxes leave behind and
// kills what runs in them.
package cgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api/procfs"
)

// Remove deletes the cgroup at path (every v1 hierarchy, or the v2
// directory) once its sandbox is gone. gVisor removes it on a normal
// delete, but not when sandbox start-up fails or the sandbox is killed
// from outside; this makes teardown leave nothing behind either way. A
// cgroup that still has processes is left alone (and logged).
func Remove(ctx context.Context, path string) {
	if path == "" {
		return
	}
	var err error
	if cgroups.Mode() == cgroups.Unified {
		var m *cgroup2.Manager
		if m, err = cgroup2.Load(path); err == nil {
			err = m.Delete()
		}
	} else {
		var cg cgroup1.Cgroup
		if cg, err = cgroup1.Load(cgroup1.StaticPath(path)); err == nil {
			err = cg.Delete()
		}
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, cgroup1.ErrCgroupDeleted) {
		log.G(ctx).WithError(err).Debugf("gvx: remove cgroup %s", path)
	}
}

// RemoveIfEmpty removes the cgroup at path (every v1 hierarchy, or the v2
// directory) when it exists and holds neither processes nor cgroups: the
// namespace cgroup containerd's default cgroupsPath (/<namespace>/<id>)
// leaves once the namespace's last task is gone.
func RemoveIfEmpty(ctx context.Context, path string) {
	dirs := procsFiles(path)
	found := false
	for _, f := range dirs {
		dir := filepath.Dir(f)
		es, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		found = true
		for _, e := range es {
			if e.IsDir() {
				return
			}
		}
	}
	if !found || len(Procs(path)) > 0 {
		return
	}
	Remove(ctx, path)
}

// Procs lists the processes in the cgroup at path (every v1 hierarchy, or
// the v2 directory), each once.
func Procs(path string) []int {
	if path == "" {
		return nil
	}
	seen := map[int]bool{}
	var out []int
	for _, f := range procsFiles(path) {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(field); err == nil && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out
}

// unnice sets every thread of process pid to niceness 0: a killed
// process still needs the CPU to exit (unmapping its memory), and at
// niceness 19 — a pool sandbox's while it boots — it gets almost none on
// a busy host: a process of 800 MiB took 3.5–4.0 s to exit after SIGKILL
// with both CPUs of the VM busy at niceness 0, 0.09–0.12 s when reniced
// first. A cgroup still holding it when Kill gives up cannot be removed
// (a pool sandbox's cgroup left after TestFaultSoak on a busy VM).
func unnice(pid int) {
	for _, tid := range procfs.Threads(pid) {
		_ = unix.Setpriority(unix.PRIO_PROCESS, tid, 0)
	}
}

// procsFiles are the cgroup.procs files of the cgroup at path.
func procsFiles(path string) []string {
	files, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", path, "cgroup.procs"))
	return append(files, filepath.Join("/sys/fs/cgroup", path, "cgroup.procs"))
}

// Kill sends SIGKILL to every process in the cgroup at path (any v1
// hierarchy, or the v2 directory) and waits, up to timeout, until the
// cgroup is empty, so that it can be removed. It returns how many processes
// it found; none means the cgroup is empty or absent.
func Kill(path string, timeout time.Duration) (int, error) {
	if path == "" {
		return 0, nil
	}
	files := procsFiles(path)
	seen := map[int]bool{}
	deadline := time.Now().Add(timeout)
	for {
		left := 0
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, field := range strings.Fields(string(data)) {
				pid, err := strconv.Atoi(field)
				if err != nil {
					continue
				}
				left++
				if !seen[pid] {
					unnice(pid)
				}
				if !seen[pid] || procfs.Alive(pid) {
					seen[pid] = true
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
		}
		if left == 0 {
			return len(seen), nil
		}
		if time.Now().After(deadline) {
			return len(seen), fmt.Errorf("cgroup %s: %d processes still in it after SIGKILL", path, left)
		}
		time.Sleep(time.Millisecond)
	}
}
