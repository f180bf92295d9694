// Package taskio finds and removes the stdio FIFOs of a containerd task
// whose creator is gone.
//
// containerd's client makes a task's FIFOs in a directory of their own
// (cio.NewFIFOSetInDir: <root>/<random>/<id>-stdout, …) and removes it
// when the process that made them closes the task's IO. A task made by a
// program that died, and removed by another (a restarted gvx serve, a
// later `gvx rm`), leaves that directory behind: its remover asks
// containerd where the task's FIFOs are (FIFODir) before deleting the
// task, and removes them after (Remove).
package taskio

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	tasks "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
)

// DefaultRoot is where containerd's client makes FIFOs when not told.
const DefaultRoot = "/run/containerd/fifo"

// FIFODir returns the directory of container id's task's stdio FIFOs when
// it is one containerd's client made directly under one of roots (or
// DefaultRoot), else "".
func FIFODir(ctx context.Context, c *client.Client, id string, roots ...string) string {
	resp, err := c.TaskService().Get(ctx, &tasks.GetRequest{ContainerID: id})
	if err != nil || resp.GetProcess() == nil {
		return ""
	}
	p := resp.GetProcess()
	for _, f := range []string{p.GetStdout(), p.GetStderr(), p.GetStdin()} {
		if d := fifoDir(f, id, append(roots, DefaultRoot)); d != "" {
			return d
		}
	}
	return ""
}

// fifoDir is the directory of FIFO path f when f is <root>/<dir>/<id>-…
// for one of roots.
func fifoDir(f, id string, roots []string) string {
	if f == "" || !filepath.IsAbs(f) || filepath.Clean(f) != f {
		return ""
	}
	dir, base := filepath.Split(f)
	if !strings.HasPrefix(base, id+"-") {
		return ""
	}
	dir = filepath.Clean(dir)
	for _, r := range roots {
		if r != "" && filepath.Dir(dir) == filepath.Clean(r) {
			return dir
		}
	}
	return ""
}

// Remove removes FIFO directory dir (from FIFODir; "" is nothing): only
// FIFOs, and the directory once empty.
func Remove(dir string) error {
	if dir == "" {
		return nil
	}
	es, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range es {
		if e.Type()&os.ModeNamedPipe != 0 {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}
