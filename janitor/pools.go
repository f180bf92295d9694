package janitor

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sandbox"
)

// pools destroys pool sandboxes nobody owns — unclaimed ones whose server
// is gone, claimed ones whose task containerd no longer knows — and pool
// directories left with neither server nor sandbox.
func (s *sweep) pools(ctx context.Context) {
	links := s.poolLinks()
	entries, _ := os.ReadDir(s.o.Layout.Pools())
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := api.PoolDir(filepath.Join(s.o.Layout.Pools(), e.Name()))
		served := s.poolServed(dir)
		left := 0 // sandboxes this sweep leaves
		for _, d := range dir.Sandboxes() {
			id := filepath.Base(string(d))
			sb, err := sandbox.Load(d.Record())
			if err != nil {
				// Died while booting: the pool server's own layout.
				sb = &sandbox.Sandbox{ID: id, Dir: string(d), Root: d.Root(), PidFile: d.PidFile(), Cgroup: "/" + poolCgroupParent + "/" + id}
			}
			var why string
			if st, err := os.Stat(d.Claimed()); err == nil {
				if !s.old(st.ModTime()) || !s.cd.complete() {
					left++
					continue
				}
				tid, linked := links[string(d.Root())]
				if linked && s.cd.ids[tid] {
					left++
					continue
				}
				why = "claimed, and no task's sentry root links to it"
				if linked {
					why = "claimed by task " + tid + ", which no containerd knows"
				}
			} else {
				if served || !s.old(modTime(string(d))) {
					left++
					continue
				}
				why = "ready, and no pool server answers for its pool"
			}
			s.add(KindPoolSandbox, id, why, func() (string, error) {
				if err := sb.Destroy(ctx, s.o.Sentry); err != nil {
					return "", err
				}
				return "destroyed", nil
			})
		}
		if served || left > 0 || (!s.o.DryRun && len(dir.Sandboxes()) > 0) {
			s.inUse++
			continue
		}
		if _, err := os.Stat(string(dir)); err != nil {
			continue
		}
		if !s.old(modTime(string(dir))) {
			s.inUse++
			continue
		}
		s.add(KindPool, string(dir), "no pool server and no sandbox", func() (string, error) {
			sandbox.RemovePoolDir(dir)
			if _, err := os.Stat(string(dir)); err == nil {
				return "", os.ErrExist
			}
			return "removed (image unmounted)", nil
		})
	}
}

// poolServed: a pool server answers for dir. Its sandboxes record its
// socket; without any, any running `gvx pool serve` may be its server.
func (s *sweep) poolServed(dir api.PoolDir) bool {
	if v, ok := s.served[dir]; ok {
		return v
	}
	served := false
	socket := ""
	for _, d := range dir.Sandboxes() {
		if sb, err := sandbox.Load(d.Record()); err == nil && sb.Pool != nil && sb.Pool.Socket != "" {
			socket = sb.Pool.Socket
			break
		}
	}
	if socket != "" {
		served = answers(socket)
	} else {
		for _, p := range s.procs {
			if p.isPoolServer() {
				served = true
			}
		}
	}
	s.served[dir] = served
	return served
}

// poolInUse: dir still exists with a server or a sandbox.
func (s *sweep) poolInUse(dir api.PoolDir) bool {
	if _, err := os.Stat(string(dir)); err != nil {
		return false
	}
	return s.poolServed(dir) || len(dir.Sandboxes()) > 0
}

// poolLinks maps the roots of adopted pool sandboxes to the tasks whose
// sentry roots link to them.
func (s *sweep) poolLinks() map[string]string {
	out := map[string]string{}
	tasks, _ := os.ReadDir(s.o.Layout.SentryRoots())
	for _, t := range tasks {
		dir := filepath.Join(s.o.Layout.SentryRoots(), t.Name())
		nss, _ := os.ReadDir(dir)
		for _, ns := range nss {
			if ns.Type()&os.ModeSymlink == 0 {
				continue
			}
			if target, err := os.Readlink(filepath.Join(dir, ns.Name())); err == nil {
				out[target] = t.Name()
			}
		}
	}
	return out
}

// answers: something accepts connections on the unix socket.
func answers(socket string) bool {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// modTime is a path's modification time (now if it cannot be read: too
// young to touch).
func modTime(path string) time.Time {
	st, err := os.Lstat(path)
	if err != nil {
		return time.Now()
	}
	return st.ModTime()
}
