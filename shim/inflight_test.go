package shim

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/api/runtime/task/v3"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/emptypb"
)

// innerService stands for the runc task service: it records the calls
// that reach it.
type innerService struct {
	task.TTRPCTaskService
	mu    sync.Mutex
	calls []string
}

func (f *innerService) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *innerService) Delete(_ context.Context, r *task.DeleteRequest) (*task.DeleteResponse, error) {
	f.record("delete " + r.ID)
	return &task.DeleteResponse{}, nil
}

func (f *innerService) Shutdown(_ context.Context, r *task.ShutdownRequest) (*emptypb.Empty, error) {
	f.record("shutdown " + r.ID)
	return &emptypb.Empty{}, nil
}

func newInflightService() (*service, *innerService) {
	inner := &innerService{}
	return &service{TTRPCTaskService: inner, tasks: map[string]*gvxTask{}, creating: map[string]*inflight{}}, inner
}

// waitAbandoned waits until create c of s is marked abandoned.
func waitAbandoned(s *service, c *inflight) {
	for {
		s.mu.Lock()
		ab := c.abandoned
		s.mu.Unlock()
		if ab {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// A Delete during a create abandons it and returns only once the create
// has; the abandoned create does not register its task.
func TestDeleteWaitsForCreate(t *testing.T) {
	s, inner := newInflightService()
	c, err := s.beginCreate(&task.CreateTaskRequest{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.beginCreate(&task.CreateTaskRequest{ID: "a"}); err == nil {
		t.Error("a second create of a under way was accepted")
	}
	waited := make(chan error, 1)
	go func() { waited <- s.awaitCreate(context.Background(), "a") }()
	select {
	case err := <-waited:
		t.Fatalf("awaitCreate returned (%v) while the create was under way", err)
	case <-time.After(50 * time.Millisecond):
	}
	// The create may not have seen the abandon yet when it finishes: wait
	// until the waiter has set it.
	waitAbandoned(s, c)
	if !s.finishCreate("a", c, &gvxTask{}) {
		t.Fatal("finishCreate did not report the create abandoned")
	}
	if s.task("a") != nil {
		t.Error("an abandoned create registered its task")
	}
	if err := s.abandonCreate(context.Background(), "a"); err == nil {
		t.Error("abandonCreate returned no error for the create to fail with")
	}
	close(c.done)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if len(inner.calls) != 1 || inner.calls[0] != "delete a" {
		t.Errorf("inner calls %q, want the abandoned create's delete", inner.calls)
	}
	// Without a create under way a Delete does not wait, and a create that
	// was not abandoned registers its task.
	if err := s.awaitCreate(context.Background(), "b"); err != nil {
		t.Fatal(err)
	}
	cb, err := s.beginCreate(&task.CreateTaskRequest{ID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	tb := &gvxTask{}
	if s.finishCreate("b", cb, tb) || s.task("b") != tb {
		t.Error("create b was not registered")
	}
	// A second finish of the same create (Create's deferred one) leaves a
	// later create of the same id alone.
	cb2, err := s.beginCreate(&task.CreateTaskRequest{ID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	s.finishCreate("b", cb, nil)
	s.mu.Lock()
	still := s.creating["b"] == cb2
	s.mu.Unlock()
	if !still {
		t.Error("finishing an ended create removed a later create of the same id")
	}
}

// awaitCreate gives up when its context ends, leaving the create
// abandoned.
func TestDeleteWaitBounded(t *testing.T) {
	s, _ := newInflightService()
	c, err := s.beginCreate(&task.CreateTaskRequest{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.awaitCreate(ctx, "a"); err == nil {
		t.Fatal("awaitCreate returned nil although its context ended first")
	}
	if !s.finishCreate("a", c, &gvxTask{}) {
		t.Error("the create was not left abandoned")
	}
}

// Shutdown abandons its own task's create, waits for every create under
// way and only then reaches the runc task service.
func TestShutdownWaitsForCreates(t *testing.T) {
	s, inner := newInflightService()
	own, _ := s.beginCreate(&task.CreateTaskRequest{ID: "a"})
	other, _ := s.beginCreate(&task.CreateTaskRequest{ID: "b"})
	done := make(chan struct{})
	go func() {
		_, _ = s.Shutdown(context.Background(), &task.ShutdownRequest{ID: "a"})
		close(done)
	}()
	waitAbandoned(s, own)
	s.mu.Lock()
	if other.abandoned {
		t.Error("Shutdown of a abandoned b's create")
	}
	s.mu.Unlock()
	s.finishCreate("a", own, nil)
	close(own.done)
	select {
	case <-done:
		t.Fatal("Shutdown returned while b's create was under way")
	case <-time.After(50 * time.Millisecond):
	}
	if s.finishCreate("b", other, &gvxTask{}) {
		t.Error("b's create reported abandoned")
	}
	close(other.done)
	<-done
	if len(inner.calls) != 1 || inner.calls[0] != "shutdown a" {
		t.Errorf("inner calls %q, want one shutdown", inner.calls)
	}
}

// Abandoning a create opens its stdout FIFO for reading, as the caller
// that went away had: the runc task service's blocking open for writing
// goes through, and the read end is closed once the create has returned.
func TestAbandonOpensOutputs(t *testing.T) {
	s, _ := newInflightService()
	out := filepath.Join(t.TempDir(), "stdout")
	if err := unix.Mkfifo(out, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := s.beginCreate(&task.CreateTaskRequest{ID: "a", Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(out, os.O_WRONLY, 0) // blocks without a reader
		if err == nil {
			f.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		t.Fatalf("the open for writing returned (%v) with no reader", err)
	case <-time.After(100 * time.Millisecond):
	}
	waited := make(chan error, 1)
	go func() { waited <- s.awaitCreate(context.Background(), "a") }()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the open for writing still blocks after the create was abandoned")
	}
	s.finishCreate("a", c, nil)
	close(c.done)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	// The stand-in reader goes once the create has returned: with no
	// reader, a non-blocking open for writing fails.
	deadline := time.Now().Add(5 * time.Second)
	for {
		fd, err := unix.Open(out, unix.O_WRONLY|unix.O_NONBLOCK, 0)
		if err == unix.ENXIO {
			break
		}
		if err == nil {
			unix.Close(fd)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the FIFO still has a reader after the create returned (%v)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A delete that leaves the shim with no task arms its own shutdown, which
// comes unless a create begins first, and none is armed while a task is
// left.
func TestIdleExit(t *testing.T) {
	t.Setenv(FaultsEnv, "1")
	t.Setenv(IdleExitEnv, "50ms")
	shutdowns := func(inner *innerService) int {
		inner.mu.Lock()
		defer inner.mu.Unlock()
		n := 0
		for _, c := range inner.calls {
			if c == "shutdown " {
				n++
			}
		}
		return n
	}
	s, inner := newInflightService()
	s.armIdleExit(context.Background())
	deadline := time.Now().Add(5 * time.Second)
	for shutdowns(inner) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a shim with no task did not shut itself down")
		}
		time.Sleep(10 * time.Millisecond)
	}

	s, inner = newInflightService()
	s.armIdleExit(context.Background())
	c, _ := s.beginCreate(&task.CreateTaskRequest{ID: "a"})
	time.Sleep(200 * time.Millisecond)
	if n := shutdowns(inner); n != 0 {
		t.Errorf("a create that began after the delete was followed by %d shutdowns", n)
	}
	s.finishCreate("a", c, &gvxTask{})
	close(c.done)
	s.armIdleExit(context.Background()) // a task is left: nothing armed
	time.Sleep(200 * time.Millisecond)
	if n := shutdowns(inner); n != 0 {
		t.Errorf("a shim with a task shut itself down (%d)", n)
	}
}
