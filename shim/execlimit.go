package shim

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/gvxrun/gvx/config"
)

// Exec starts an exec unless the task already has its most execs alive
// ([resources] max_execs): each exec holds host processes (gvx-sentry
// exec, then the exec's waiter) and the shim's stdio copies until it is
// deleted, so a client firing execs without bound would exhaust the
// host's processes, memory and descriptors.
func (s *service) Exec(ctx context.Context, r *task.ExecProcessRequest) (*emptypb.Empty, error) {
	limit := config.DefaultMaxExecs
	if t := s.task(r.ID); t != nil && t.cfg.Resources.MaxExecs > 0 {
		limit = t.cfg.Resources.MaxExecs
	}
	if err := s.reserveExec(r.ID, r.ExecID, limit); err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	resp, err := s.TTRPCTaskService.Exec(ctx, r)
	if err != nil {
		s.releaseExec(r.ID, r.ExecID)
	}
	return resp, err
}

// reserveExec counts exec id of task against limit.
func (s *service) reserveExec(task, id string, limit int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := s.execs[task]
	if live == nil {
		live = map[string]bool{}
		s.execs[task] = live
	}
	if live[id] {
		return nil // the runc service answers an exec id in use
	}
	if len(live) >= limit {
		return fmt.Errorf("exec %s in task %s: the task has %d execs alive, the most [resources] max_execs allows; "+
			"wait for them and delete them (or raise max_execs): %w", id, task, len(live), errdefs.ErrResourceExhausted)
	}
	live[id] = true
	return nil
}

// releaseExec forgets exec id of task (id "" forgets all of the task's).
func (s *service) releaseExec(task, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == "" {
		delete(s.execs, task)
		return
	}
	delete(s.execs[task], id)
}
