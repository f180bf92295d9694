package shim

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/internal/slots"
)

// Exec starts an exec unless the task already has its most execs alive
// ([resources] max_execs) or the node has ([resources] node_max_execs):
// each exec holds host processes (gvx-sentry exec, then the exec's
// waiter) and the shim's stdio copies until it is deleted, so a client
// firing execs without bound — at one task or spread over many — would
// exhaust the host's processes, memory and descriptors.
func (s *service) Exec(ctx context.Context, r *task.ExecProcessRequest) (*emptypb.Empty, error) {
	limit := config.DefaultMaxExecs
	var node slots.Set
	if t := s.task(r.ID); t != nil {
		if t.cfg.Resources.MaxExecs > 0 {
			limit = t.cfg.Resources.MaxExecs
		}
		node = slots.Set{Dir: t.cfg.Layout().ExecSlots(), Size: t.cfg.Resources.NodeExecs()}
	}
	if err := s.reserveExec(r.ID, r.ExecID, limit, node); err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	resp, err := s.TTRPCTaskService.Exec(ctx, r)
	if err != nil {
		s.releaseExec(r.ID, r.ExecID)
		return resp, err
	}
	s.mu.Lock()
	if x := s.execs[r.ID][r.ExecID]; x != nil {
		x.outputs = []string{r.Stdout, r.Stderr}
	}
	s.mu.Unlock()
	return resp, nil
}

// liveExec is an exec the shim counts until its delete.
type liveExec struct {
	slot    *slots.Slot // its node slot (nil: the node has none)
	outputs []string    // its stdout and stderr paths, for the watch of its start (startwatch.go)
}

// reserveExec counts exec id of task against limit and, when node has
// slots, takes one of the node's.
func (s *service) reserveExec(task, id string, limit int, node slots.Set) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := s.execs[task]
	if live == nil {
		live = map[string]*liveExec{}
		s.execs[task] = live
	}
	if _, ok := live[id]; ok {
		return nil // the runc service answers an exec id in use
	}
	if len(live) >= limit {
		return fmt.Errorf("exec %s in task %s: the task has %d execs alive, the most [resources] max_execs allows; "+
			"wait for them and delete them (or raise max_execs): %w", id, task, len(live), errdefs.ErrResourceExhausted)
	}
	var slot *slots.Slot
	if node.Size > 0 {
		var err error
		if slot, err = node.Acquire(); errors.Is(err, slots.ErrFull) {
			return fmt.Errorf("exec %s in task %s: the node has %d execs alive, the most [resources] node_max_execs allows; "+
				"wait for execs to end and be deleted (or raise node_max_execs): %w", id, task, node.Size, errdefs.ErrResourceExhausted)
		} else if err != nil {
			return fmt.Errorf("exec %s in task %s: node exec slots: %w", id, task, err)
		}
	}
	live[id] = &liveExec{slot: slot}
	return nil
}

// releaseExec forgets exec id of task (id "" forgets all of the task's)
// and frees its node slots.
func (s *service) releaseExec(task, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == "" {
		for _, x := range s.execs[task] {
			x.slot.Release()
		}
		delete(s.execs, task)
		return
	}
	if x := s.execs[task][id]; x != nil {
		x.slot.Release()
	}
	delete(s.execs[task], id)
}
