package shim

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Creates in flight. containerd gives up on a Create whose caller went
// away (its context ended) and cleans up at once: Delete, then Shutdown,
// then it removes the bundle. ttrpc does not cancel the shim's handler,
// so the Create runs on: a Delete that came first found nothing to
// delete, and the container the Create then made kept the runc task
// service — and so the shim — alive with no owner (seen once in a full
// run: a shim left with a STOPPED container whose bundle was gone). So a
// Delete of a container being created marks that create abandoned and
// waits for it; an abandoned create takes down what it made and fails;
// and Shutdown waits for every create in flight before it lets the shim
// go.
//
// The caller that went away held the read ends of the task's stdout and
// stderr FIFOs, which the runc task service opens for writing once the
// sandbox is created — an open that blocks until a reader comes, for up
// to 30 s, while containerd's cleanup waits 5 s for the Delete and then
// leaves the shim. So abandoning a create also opens those FIFOs for
// reading (without blocking) and holds them until the create returns:
// its opens go through, it returns, and the Delete with it.

// inflight is one create under way.
type inflight struct {
	done      chan struct{} // closed once the create returned and released what it must
	abandoned bool          // a Delete or Shutdown of the container came meanwhile (s.mu)
	outputs   []string      // the create's stdout and stderr FIFOs
}

// beginCreate records that create r is under way; the caller closes the
// returned create's done as its Create returns.
func (s *service) beginCreate(r *task.CreateTaskRequest) (*inflight, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.creating[r.ID]; ok {
		return nil, grpcError(errdefs.ErrAlreadyExists, fmt.Errorf("create %s: a create of the same container is under way", r.ID))
	}
	s.disarmIdleExit()
	c := &inflight{done: make(chan struct{})}
	for _, p := range []string{r.Stdout, r.Stderr} {
		if p != "" && !slices.Contains(c.outputs, p) {
			c.outputs = append(c.outputs, p)
		}
	}
	s.creating[r.ID] = c
	return c, nil
}

// abandon marks c abandoned (under s.mu) and stands in for its caller as
// the reader of its output FIFOs until it returns.
func (c *inflight) abandon() {
	if c.abandoned {
		return
	}
	c.abandoned = true
	var held []int
	for _, p := range fifos(c.outputs...) {
		if fd, err := openReader(p); err == nil {
			held = append(held, fd)
		}
	}
	if len(held) > 0 {
		go func() {
			<-c.done
			for _, fd := range held {
				unix.Close(fd)
			}
		}()
	}
}

// fifos is those of paths that are named pipes (not files or sockets,
// which nothing waits on).
func fifos(paths ...string) []string {
	var out []string
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && st.Mode()&os.ModeNamedPipe != 0 && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// openReader opens the FIFO at p for reading without waiting for a
// writer: the shim standing in for a reader that went away.
func openReader(p string) (int, error) {
	return unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
}

// finishCreate ends create c of container id (once; later calls do
// nothing): t (nil: the create failed) becomes the container's task
// unless the create was abandoned, which it reports.
func (s *service) finishCreate(id string, c *inflight, t *gvxTask) (abandoned bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.creating[id] != c {
		return c.abandoned
	}
	delete(s.creating, id)
	if c.abandoned {
		return true
	}
	if t != nil {
		s.tasks[id] = t
	}
	return false
}

// abandonCreate takes down the sandbox an abandoned create of container
// id made and returns the error its Create answers with.
func (s *service) abandonCreate(ctx context.Context, id string) error {
	log.G(ctx).Warnf("gvx shim: %s was deleted while it was being created: taking it down", id)
	if _, err := s.TTRPCTaskService.Delete(ctx, &task.DeleteRequest{ID: id}); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx shim: delete abandoned %s", id)
	}
	// containerd, whose Delete of it may have given up, may never shut
	// the shim down.
	s.armIdleExit(ctx)
	return grpcError(errdefs.ErrAborted, fmt.Errorf("create %s: the task was deleted while it was being created", id))
}

// awaitCreate abandons container id's create, if one is under way, and
// waits until it has returned (or ctx ends).
func (s *service) awaitCreate(ctx context.Context, id string) error {
	s.mu.Lock()
	c := s.creating[id]
	if c != nil {
		c.abandon()
	}
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	log.G(ctx).Infof("gvx shim: delete of %s waits for its create", id)
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("delete %s: waiting for its create: %w", id, ctx.Err())
	}
}

// Shutdown abandons the create of the task it is for, if under way, and
// waits for every create in flight before the runc task service decides
// whether the shim may exit (it exits when it holds no container, which a
// create in flight is not yet).
func (s *service) Shutdown(ctx context.Context, r *task.ShutdownRequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	var wait []chan struct{}
	for id, c := range s.creating {
		if id == r.ID {
			c.abandon()
		}
		wait = append(wait, c.done)
	}
	s.mu.Unlock()
	for _, done := range wait {
		<-done
	}
	return s.TTRPCTaskService.Shutdown(ctx, r)
}
