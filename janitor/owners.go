package janitor

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gvxrun/gvx/api"
)

// shims stops the shims whose containerd answers and knows neither their
// task nor a container of their group: nobody will ever delete their task.
func (s *sweep) shims(context.Context) {
	for _, p := range s.sorted() {
		if !p.isShimServer() || !s.old(p.started) {
			continue
		}
		addr, ns, id := flag(p.args, "address"), flag(p.args, "namespace"), flag(p.args, "id")
		if s.cd.clients[addr] == nil || s.cd.known[ns][id] || s.cd.groups[ns][id] || s.stopped[id] {
			continue
		}
		s.orphanShims[p.pid] = true
		s.stopped[id] = true
		p := p
		s.add(KindShim, fmt.Sprintf("%d (task %s/%s)", p.pid, ns, id), "containerd "+addr+" knows no such container or group", func() (string, error) {
			return stop([]*proc{p}, s.o.Grace)
		})
	}
}

// sandboxProcs stops sandbox processes nobody owns: no live shim or pool
// server above them, no container of a containerd behind their cgroup or
// sentry root. Pool sandboxes' processes are the pool sweep's.
func (s *sweep) sandboxProcs(context.Context) {
	groups := map[string][]*proc{}
	for _, p := range s.sorted() {
		if !sandboxBinaries[p.exe] || !s.mine(p) || !s.old(p.started) || poolCgroupID(p.cgroup) != "" || s.owned(p) {
			continue
		}
		groups[p.cgroup] = append(groups[p.cgroup], p)
	}
	cgs := make([]string, 0, len(groups))
	for cg := range groups {
		cgs = append(cgs, cg)
	}
	sort.Strings(cgs)
	for _, cg := range cgs {
		ps := groups[cg]
		for _, p := range ps {
			s.reaped[p.pid] = true
		}
		if _, _, ok := nsID(cg); ok {
			s.taskCgroups[cg] = true
		}
		s.add(KindProcess, describe(ps)+" in cgroup "+cg, "no live shim or pool server above them, no container behind them", func() (string, error) {
			return stop(ps, s.o.Grace)
		})
	}
}

// owned: a live shim or pool server is an ancestor of p, or a containerd
// knows the container its cgroup or sentry root is named for.
func (s *sweep) owned(p *proc) bool {
	seen := map[int]bool{}
	for q := s.procs[p.ppid]; q != nil && q.pid > 1 && !seen[q.pid]; q = s.procs[q.ppid] {
		seen[q.pid] = true
		if q.isShimServer() {
			return !s.orphanShims[q.pid]
		}
		if q.isPoolServer() {
			return true
		}
	}
	if ns, id, ok := nsID(p.cgroup); ok && s.cd.known[ns][id] {
		return true
	}
	if root := flag(p.args, "root"); root != "" {
		if strings.HasPrefix(root, s.o.Layout.Pools()+"/") {
			return true // a pool sandbox outside its cgroup: the pool sweep's
		}
		if id := s.sentryRootID(root); id != "" && s.cd.ids[id] {
			return true
		}
	}
	return false
}

// mine: p works on this sweep's state directory (its command line names
// a path below it: gVisor passes --root on to every process it starts).
func (s *sweep) mine(p *proc) bool {
	dir := filepath.Clean(s.o.Layout.Dir) + "/"
	for _, a := range p.args {
		if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(v, dir) || strings.HasPrefix(a, dir) {
			return true
		}
	}
	return false
}

// sentryRootID is the task id of a path in a sentry root ("" if it is in
// none).
func (s *sweep) sentryRootID(path string) string {
	rel, ok := strings.CutPrefix(path, s.o.Layout.SentryRoots()+"/")
	if !ok {
		return ""
	}
	return strings.Split(rel, "/")[0]
}

// nsID splits a task cgroup path /<namespace>/<id> (containerd's default).
func nsID(cg string) (ns, id string, ok bool) {
	parts := strings.Split(strings.Trim(cg, "/"), "/")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" || parts[0] == poolCgroupParent {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// poolCgroupParent holds the pool sandboxes' cgroups (pool.Server).
const poolCgroupParent = api.PoolCgroupParent

// poolCgroupID is the pool sandbox id of a cgroup path ("" if it is none).
func poolCgroupID(cg string) string {
	if filepath.Dir(cg) != "/"+poolCgroupParent {
		return ""
	}
	if id := filepath.Base(cg); strings.HasPrefix(id, api.PoolSandboxPrefix) {
		return id
	}
	return ""
}

// referenced: a gvx process not reaped by this sweep names path (or a
// file below it) on its command line or works in it.
func (s *sweep) referenced(path string) bool {
	under := func(p string) bool { return p == path || strings.HasPrefix(p, path+"/") }
	for _, p := range s.procs {
		if !gvxBinaries[p.exe] || s.reaped[p.pid] || s.orphanShims[p.pid] {
			continue
		}
		if under(p.cwd) {
			return true
		}
		for _, a := range p.args {
			if _, v, ok := strings.Cut(a, "="); ok && under(v) || under(a) {
				return true
			}
		}
	}
	return false
}

// sorted lists the process table by pid.
func (s *sweep) sorted() []*proc {
	out := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}
