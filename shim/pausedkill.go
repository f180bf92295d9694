package shim

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/containerd/containerd/api/runtime/task/v3"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/log"
	"google.golang.org/protobuf/types/known/emptypb"
)

// gVisor signals no paused container ("cannot signal container in state
// paused"), while runc does: a paused task is one ctr paused, or one
// containerd's client paused around its checkpoint — so a kill that came
// during a checkpoint failed and the task ran on. The shim signals a
// paused task as runc does: SIGKILL to its init resumes it first, so
// that it dies; other signals, and an exec's, stay pending until the task
// is resumed. A kill waits for a checkpoint of the task under way, up to
// killWait (Kill takes the task's checkpointing lock, which Checkpoint
// holds throughout).

// killWait bounds how long a kill waits for a checkpoint of its task: one
// that hangs (in gVisor's save) must not make the task unkillable.
const killWait = time.Minute

// lockForKill takes the task's checkpointing lock for a kill, waiting at
// most killWait (or until ctx ends) for a checkpoint under way; it reports
// whether it holds the lock.
func (t *gvxTask) lockForKill(ctx context.Context) bool {
	deadline := time.Now().Add(killWait)
	for !t.checkpointing.TryLock() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			log.G(ctx).Warnf("gvx shim: %s: a checkpoint of it is still under way; the kill goes ahead without waiting for it", t.rec.ID)
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// paused reports whether task id is paused (an exec's status is its
// task's then).
func (s *service) paused(ctx context.Context, id string) bool {
	st, err := s.TTRPCTaskService.State(ctx, &task.StateRequest{ID: id})
	return err == nil && st.Status == tasktypes.Status_PAUSED
}

// killPaused signals paused task t (r: its init or an exec) as runc
// would: SIGKILL to its init resumes the task (the signals kept go first)
// and kills; another signal, or any to an exec, is kept for its resume
// (an exec's SIGKILL would otherwise end its host waiter and leave the
// guest process). The caller holds t's checkpointing lock.
func (s *service) killPaused(ctx context.Context, t *gvxTask, r *task.KillRequest) (*emptypb.Empty, error) {
	if syscall.Signal(r.Signal) != syscall.SIGKILL || r.ExecID != "" {
		t.pendingMu.Lock()
		t.pending = append(t.pending, r)
		t.pendingMu.Unlock()
		log.G(ctx).Debugf("gvx shim: %s is paused: signal %d kept for its resume", r.ID, r.Signal)
		return &emptypb.Empty{}, nil
	}
	if _, err := s.TTRPCTaskService.Resume(ctx, &task.ResumeRequest{ID: r.ID}); err != nil {
		return nil, fmt.Errorf("kill paused task %s: resume it for SIGKILL: %w", r.ID, err)
	}
	t.paused.Store(false)
	for _, k := range t.takePending() {
		_, _ = s.kill(ctx, t, k)
	}
	return s.kill(ctx, t, r)
}

// Pause pauses a task, and records it.
func (s *service) Pause(ctx context.Context, r *task.PauseRequest) (*emptypb.Empty, error) {
	resp, err := s.TTRPCTaskService.Pause(ctx, r)
	if err == nil {
		if t := s.task(r.ID); t != nil {
			t.paused.Store(true)
		}
	}
	return resp, err
}

// Resume resumes a paused task, then delivers the signals sent while it
// was paused.
func (s *service) Resume(ctx context.Context, r *task.ResumeRequest) (*emptypb.Empty, error) {
	resp, err := s.TTRPCTaskService.Resume(ctx, r)
	if err != nil {
		return resp, err
	}
	if t := s.task(r.ID); t != nil {
		t.paused.Store(false)
	}
	s.deliverPending(ctx, r.ID)
	return resp, nil
}

// deliverPending sends task id, running again, the signals kept while it
// was paused.
func (s *service) deliverPending(ctx context.Context, id string) {
	t := s.task(id)
	if t == nil {
		return
	}
	for _, k := range t.takePending() {
		if _, err := s.Kill(ctx, k); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx shim: %s resumed: deliver signal %d sent while it was paused", id, k.Signal)
		}
	}
}

// takePending returns and forgets the signals kept for the task's resume.
func (t *gvxTask) takePending() []*task.KillRequest {
	t.pendingMu.Lock()
	defer t.pendingMu.Unlock()
	p := t.pending
	t.pending = nil
	return p
}

// dropPending forgets them (the task is deleted).
func (t *gvxTask) dropPending() { _ = t.takePending() }
