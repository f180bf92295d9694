package janitor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/mountinfo"
	"github.com/gvxrun/gvx/sandbox"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/internal/cgroups"
)

// stateDirs removes the state gvx keeps per task — sentry roots, rootfs
// mounts, volume staging and docker directories — of tasks no containerd
// knows, unmounting what is mounted there first.
func (s *sweep) stateDirs(context.Context) {
	if !s.cd.complete() {
		s.skip("state directories and task cgroups: not every containerd answered (give them with --containerd)")
		return
	}
	l := s.o.Layout
	roots, _ := os.ReadDir(l.SentryRoots())
	for _, e := range roots {
		id, path := e.Name(), filepath.Join(l.SentryRoots(), e.Name())
		if s.cd.ids[id] || s.stopped[id] || s.referenced(path) || !s.old(modTime(path)) {
			if !s.stopped[id] {
				// (A task whose shim this sweep stopped has no sandbox
				// left; containerd removes its state, the next sweep
				// the rest.)
				s.inUse++
			}
			continue
		}
		nss, _ := os.ReadDir(path)
		for _, ns := range nss {
			if _, ok := s.cd.known[ns.Name()]; ok {
				s.taskCgroups["/"+ns.Name()+"/"+id] = true
			}
		}
		s.removeTree(path, "sentry root of task "+id+", which no containerd knows")
	}
	for _, base := range []string{l.RootfsDir(), l.VolumesDir(), l.DockerDir()} {
		nss, _ := os.ReadDir(base)
		for _, ns := range nss {
			nsDir := filepath.Join(base, ns.Name())
			ids, _ := os.ReadDir(nsDir)
			for _, e := range ids {
				id, path := e.Name(), filepath.Join(nsDir, e.Name())
				if s.cd.known[ns.Name()][id] || s.stopped[id] || s.referenced(path) || !s.old(modTime(path)) {
					continue
				}
				if base == l.DockerDir() && api.UnixListening(filepath.Join(path, api.DockerSocketName)) {
					// A rolled-back sandbox's dockerd socket, moved to
					// the sandbox's path from its current backing's.
					continue
				}
				s.taskCgroups["/"+ns.Name()+"/"+id] = true
				s.removeTree(path, "of task "+ns.Name()+"/"+id+", which no containerd knows")
			}
			if !s.o.DryRun {
				_ = os.Remove(nsDir) // once empty
			}
		}
	}
}

// sharedNetNS unpins the empty network namespace gVisor's gofers share
// (api.Layout.SharedSentryRoot) once the sweep leaves no sandbox: no
// task's sentry root and no pool directory (s.inUse). Unpinning while a
// sandbox starts is harmless too: gVisor holds the namespace open before
// its gofer joins it, and a later gofer pins a new one.
func (s *sweep) sharedNetNS() {
	l := s.o.Layout
	if s.inUse > 0 || (!s.cd.complete() && s.anyRoot()) {
		return
	}
	shared := api.SentryRoot(l.SharedSentryRoot())
	for _, m := range mountsUnder(shared.NullNetNS()) {
		s.add(KindMount, m, "the gofers' shared empty network namespace; no sandbox is left", func() (string, error) {
			sandbox.UnpinNetNS(shared)
			if len(mountsUnder(m)) > 0 {
				return "", fmt.Errorf("still mounted")
			}
			return "unmounted", nil
		})
	}
}

// anyRoot: a task has a sentry root.
func (s *sweep) anyRoot() bool {
	roots, _ := os.ReadDir(s.o.Layout.SentryRoots())
	return len(roots) > 0
}

// removeTree unmounts every mount at or below path, deepest first, then
// removes path — only once nothing is mounted below it any more.
func (s *sweep) removeTree(path, why string) {
	for _, m := range mountsUnder(path) {
		s.add(KindMount, m, "in "+path, func() (string, error) {
			for unix.Unmount(m, unix.MNT_DETACH) == nil {
			}
			for _, left := range mountsUnder(m) {
				if left == m {
					return "", fmt.Errorf("still mounted")
				}
			}
			return "unmounted", nil
		})
	}
	s.add(KindStateDir, path, why, func() (string, error) {
		if left := mountsUnder(path); len(left) > 0 {
			return "", fmt.Errorf("not removed: %s still mounted", strings.Join(left, ", "))
		}
		if err := os.RemoveAll(path); err != nil {
			return "", err
		}
		return "removed", nil
	})
}

// mountsUnder lists the mount points at or below path in this mount
// namespace, deepest first.
func mountsUnder(path string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	seen := map[string]bool{}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		mp := mountinfo.Unescape(f[4])
		if (mp == path || strings.HasPrefix(mp, path+"/")) && !seen[mp] {
			seen[mp] = true
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// cgroups removes pool sandboxes' cgroups no pool sandbox has any more,
// and the cgroups of the tasks found to be garbage, killing what is left
// in them.
func (s *sweep) cgroups(ctx context.Context) {
	// cgroupfs has no creation times: a pool sandbox's directory comes
	// before its cgroup, and a cgroup's processes have start times.
	ids := map[string]bool{}
	for _, pattern := range []string{"/sys/fs/cgroup/*/" + poolCgroupParent + "/*", "/sys/fs/cgroup/" + poolCgroupParent + "/*"} {
		dirs, _ := filepath.Glob(pattern)
		for _, d := range dirs {
			if st, err := os.Stat(d); err == nil && st.IsDir() && poolCgroupID("/"+poolCgroupParent+"/"+filepath.Base(d)) != "" {
				ids[filepath.Base(d)] = true
			}
		}
	}
	have := map[string]bool{}
	pools, _ := filepath.Glob(filepath.Join(s.o.Layout.Pools(), "*", "*"))
	for _, p := range pools {
		have[filepath.Base(p)] = true
	}
	var paths []string
	for id := range ids {
		if !have[id] && s.poolCgroupMine(id) {
			paths = append(paths, "/"+poolCgroupParent+"/"+id)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		s.add(KindCgroup, p, "no pool sandbox has it", func() (string, error) { return removeCgroup(ctx, p) })
	}
	if !s.o.DryRun {
		parents, _ := filepath.Glob("/sys/fs/cgroup/*/" + poolCgroupParent)
		for _, d := range append(parents, "/sys/fs/cgroup/"+poolCgroupParent) {
			_ = os.Remove(d) // refused while a sandbox has a cgroup below it
		}
	}
	paths = paths[:0]
	for cg := range s.taskCgroups {
		if ns, id, ok := nsID(cg); ok && !s.cd.known[ns][id] && !s.stopped[id] && cgroupExists(cg) {
			paths = append(paths, cg)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		s.add(KindCgroup, p, "of a gvx task no containerd knows", func() (string, error) { return removeCgroup(ctx, p) })
	}
}

// poolCgroupMine: pool sandbox id's cgroup is empty or holds processes
// of this sweep's state directory (another state directory's pools have
// cgroups there too), none of them young.
func (s *sweep) poolCgroupMine(id string) bool {
	pids := cgroups.Procs("/" + poolCgroupParent + "/" + id)
	mine := len(pids) == 0
	for _, pid := range pids {
		p := s.procs[pid]
		if p != nil && !s.old(p.started) {
			return false
		}
		mine = mine || p != nil && s.mine(p)
	}
	return mine
}

// removeCgroup kills what is in the cgroup at path and removes it.
func removeCgroup(ctx context.Context, path string) (string, error) {
	n, err := cgroups.Kill(path, 5*time.Second)
	if err != nil {
		return "", err
	}
	cgroups.Remove(ctx, path)
	if cgroupExists(path) {
		return "", errors.New("still there after its removal")
	}
	if n > 0 {
		return fmt.Sprintf("removed (SIGKILL to %d processes)", n), nil
	}
	return "removed", nil
}

// cgroupExists: a directory of the cgroup at path is in some hierarchy.
func cgroupExists(path string) bool {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", path))
	for _, d := range append(dirs, filepath.Join("/sys/fs/cgroup", path)) {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return true
		}
	}
	return false
}
