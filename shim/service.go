package shim

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/api/runtime/task/v3"
	tasktypes "github.com/containerd/containerd/api/types/task"
	runctask "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/task"
	"github.com/containerd/containerd/v2/pkg/oom"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/containerd/v2/pkg/sys/reaper"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/volume"
)

// service is the task service: containerd's runc task service, driving
// gvx-sentry, with gvx's preparation in front of Create (gvxTask) and its
// release after Delete.
type service struct {
	task.TTRPCTaskService

	mu    sync.Mutex
	tasks map[string]*gvxTask // by container id
	// creating holds the creates under way, by container id (inflight.go).
	creating map[string]*inflight
	execs    map[string]map[string]*liveExec // live execs by container id and exec id (execlimit.go)
	// oom reports OOM events of the sandboxes of containers that run
	// inside one (see sandboxcg.go).
	oom oom.Watcher
	// events is the runc task service's publisher, which reports the
	// OOM kills of containers' monitors (oomevent.go).
	events *oomPublisher
	// trim returns the heap starting and deleting tasks and execs left,
	// once the shim is quiet (trim.go).
	trim trimmer
	// idle, while the shim has no task (at start, after a delete or a
	// failed create), shuts it down if containerd does not (idleexit.go);
	// s.mu.
	idle *time.Timer
}

// NewTaskService returns gvx's task service.
func NewTaskService(ctx context.Context, publisher shim.Publisher, sd shutdown.Service) (task.TTRPCTaskService, error) {
	// The task service reaps every child of the shim: volume checks
	// (e2fsck) wait through its reaper.
	volume.Runner = runReaped
	s := &service{tasks: map[string]*gvxTask{}, creating: map[string]*inflight{}, execs: map[string]map[string]*liveExec{}}
	s.events = &oomPublisher{Publisher: publisher, task: s.task}
	inner, err := runctask.NewTaskService(ctx, s.events, sd)
	if err != nil {
		return nil, err
	}
	s.TTRPCTaskService = inner
	go s.watchMonitorExits(ctx, reaper.Default.Subscribe())
	if s.oom, err = newOOMWatcher(ctx, publisher); err != nil {
		log.G(ctx).WithError(err).Warn("gvx shim: no OOM events for containers inside a running sandbox")
	}
	// A create that never comes (its client died after containerd started
	// the shim) leaves the shim with nothing to serve.
	s.armIdleExit(ctx)
	return s, nil
}

// RegisterTTRPC registers this service (not the inner one) on the server.
func (s *service) RegisterTTRPC(server *ttrpc.Server) error {
	task.RegisterTTRPCTaskService(server, s)
	return nil
}

// Create prepares the bundle for an unprivileged sandbox and creates it.
func (s *service) Create(ctx context.Context, r *task.CreateTaskRequest) (_ *task.CreateTaskResponse, retErr error) {
	t0 := time.Now()
	c, err := s.beginCreate(r)
	if err != nil {
		return nil, err
	}
	// Last, after the release below: a failed create ends, and a Delete
	// waiting for it goes on once it has released what it must.
	defer func() {
		if retErr != nil {
			s.finishCreate(r.ID, c, nil)
		}
		close(c.done)
		if retErr != nil {
			// containerd deletes a failed create and shuts the shim
			// down, unless it stopped with the client that asked.
			s.armIdleExit(ctx)
		}
	}()
	// containerd's extraction of a checkpoint for a restore (restorecopy.go)
	// is the task's to remove: also when newTask refuses the task before
	// its record exists.
	copyDir := ""
	if r.Checkpoint != "" && restoreCopy(r.Checkpoint) {
		copyDir = r.Checkpoint
	}
	t, err := newTask(ctx, r, s.task)
	if err != nil {
		if copyDir != "" {
			if rerr := os.RemoveAll(copyDir); rerr != nil {
				log.G(ctx).WithError(rerr).Warnf("gvx shim: %s: remove containerd's copy of its checkpoint", r.ID)
			}
		}
		return nil, err
	}
	defer func() {
		if retErr != nil {
			t.release(ctx)
		}
	}()
	if err := t.prepare(ctx); err != nil {
		return nil, err
	}
	tPrep := time.Since(t0)
	t.slowCreate(ctx)
	resp, err := s.TTRPCTaskService.Create(ctx, r)
	if err != nil {
		return nil, err
	}
	t.crashAfter(ctx, FaultCreated)
	if s.finishCreate(r.ID, c, t) {
		return nil, s.abandonCreate(ctx, r.ID)
	}
	t.monitorCreated(ctx, resp.Pid)
	if t.createFront && t.restoring == nil {
		// Created; a restore's start would restore through gvx-runtime
		// too, a plain start needs none of it.
		if err := sentryLink(t.binary, t.rec.Sentry); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx shim: %s: its start goes through gvx-runtime", r.ID)
		}
	}
	log.G(ctx).Debugf("gvx shim: created %s in %s (preparation %s, of which rootfs mount %s; sandbox create %s)",
		r.ID, time.Since(t0), tPrep, t.tRootfs, time.Since(t0)-tPrep)
	if t.docker != nil && t.rec.Sandbox != nil {
		t.docker.state = t.rec.Sandbox.Root.SandboxState(r.ID)
		go t.docker.serve(context.WithoutCancel(ctx))
	}
	s.watchSandboxOOM(ctx, r.ID, t.rec.SandboxCgroup)
	return resp, nil
}

// Start starts a task or exec — a restore target's start restores the
// checkpoint named for it (target.go); a restored docker-mode task's guest
// gets dockerd's bridges back (restoreBridges) before Start returns.
func (s *service) Start(ctx context.Context, r *task.StartRequest) (*task.StartResponse, error) {
	if r.ExecID == "" {
		if err := s.task(r.ID).startTarget(); err != nil {
			return nil, err
		}
		if err := s.task(r.ID).awaitUTS(); err != nil {
			return nil, grpcError(errdefs.ErrUnavailable, err)
		}
	}
	var stop func()
	if r.ExecID == "" {
		stop = s.watchStart(ctx, s.task(r.ID))
	} else {
		stop = s.watchExecStart(ctx, r.ID, r.ExecID)
	}
	resp, err := s.TTRPCTaskService.Start(ctx, r)
	stop()
	s.trim.soon()
	if err != nil || r.ExecID != "" {
		if err != nil && r.ExecID == "" {
			err = s.task(r.ID).explainRestore(err)
		}
		return resp, err
	}
	t := s.task(r.ID)
	if t != nil && !t.front && t.binary != "" {
		// A sandbox's root container: its execs and kills from now on
		// through gvx-runtime, which needs no gvx-sentry start-up for
		// them.
		if err := frontLink(t.binary, t.rec.Sentry); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx shim: %s: its execs go through gvx-sentry", r.ID)
		}
		t.front = true
	}
	if t != nil && t.rec.RestoreCopy != "" {
		t.removeRestoreCopy(ctx)
	}
	if t != nil && t.restoring != nil && t.docker != nil {
		t0 := time.Now()
		if err := t.restoreBridges(ctx, r.ID); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx shim: restored %s: new inner containers may have no network", r.ID)
		} else {
			log.G(ctx).Infof("gvx shim: restored %s: dockerd's bridges made again in %s", r.ID, time.Since(t0))
		}
	}
	return resp, nil
}

// task is the task of container id, if this shim created it.
func (s *service) task(id string) *gvxTask {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tasks[id]
}

// Delete deletes the process and, for a container's init, the root
// filesystem gvx mounted.
func (s *service) Delete(ctx context.Context, r *task.DeleteRequest) (*task.DeleteResponse, error) {
	if r.ExecID == "" {
		if err := s.awaitCreate(ctx, r.ID); err != nil {
			return nil, err
		}
		if t := s.task(r.ID); t != nil {
			// Before the delete removes the OOM marker and the task:
			// a client that deletes the task as soon as it has seen
			// it exit (CRI does) may come before the exit's event.
			s.events.publishOOM(ctx, t)
			// No kill by the task's id may outlive its delete.
			t.endAll.stop(ctx)
			// Nor may the setting of its hostname in an adopted pool
			// sandbox, which the sandbox's reset would race.
			_ = t.awaitUTS()
			s.killCutRestore(ctx, t)
		}
	}
	resp, err := s.TTRPCTaskService.Delete(ctx, r)
	s.trim.soon()
	if err == nil || errdefs.IsNotFound(errgrpc.ToNative(err)) {
		s.releaseExec(r.ID, r.ExecID)
	}
	if err == nil && r.ExecID != "" {
		if t := s.task(r.ID); t != nil {
			removeExecGuestPid(ctx, t.rec.Bundle, r.ExecID)
		}
	}
	if err != nil || r.ExecID != "" {
		return resp, err
	}
	s.mu.Lock()
	t := s.tasks[r.ID]
	delete(s.tasks, r.ID)
	s.mu.Unlock()
	if t != nil {
		t.dropPending()
		t.resetSandbox(ctx)
		t.release(ctx)
	}
	s.armIdleExit(ctx)
	return resp, nil
}

// killCutRestore kills the processes of a restored task whose start its
// client cut short (it died): gVisor restored the container, but the runc
// task service holds the task as created and deletes it with the
// runtime's unforced delete, which runsc refuses for a running container
// ("not stopped without --force") — the task could not be deleted, and
// its sandbox stayed. Killed first, the container has stopped by then.
func (s *service) killCutRestore(ctx context.Context, t *gvxTask) {
	if t.restoring == nil && t.target == nil {
		return
	}
	st, err := s.TTRPCTaskService.State(ctx, &task.StateRequest{ID: t.rec.ID})
	if err != nil || st.Status != tasktypes.Status_CREATED {
		return
	}
	if _, err := s.TTRPCTaskService.Kill(ctx, &task.KillRequest{ID: t.rec.ID, Signal: uint32(syscall.SIGKILL), All: true}); err != nil {
		log.G(ctx).WithError(err).Debugf("gvx shim: kill %s, a restore never started, before its delete", t.rec.ID)
	}
}

// Stats reports a container's metrics; a container inside a running
// sandbox reports its sandbox's.
func (s *service) Stats(ctx context.Context, r *task.StatsRequest) (*task.StatsResponse, error) {
	t := s.task(r.ID)
	if t == nil || t.rec.SandboxCgroup == "" {
		return s.TTRPCTaskService.Stats(ctx, r)
	}
	resp, err := sandboxStats(t.rec.SandboxCgroup)
	if err != nil {
		return nil, grpcError(errdefs.ErrNotFound, err)
	}
	return resp, nil
}

// Kill signals a process; an exec's SIGKILL and SIGSTOP go to its process
// in the sandbox (killExecInGuest). When the sandbox is already gone or
// going (it exited, or was killed from outside), containerd expects NotFound
// (clients such as nerdctl forward signals after exit, and
// Delete(WithProcessKill) kills again), not an unknown error. gvx-sentry
// says so in runc's words (api.NotRunning), which the runc task service
// maps to NotFound itself; a process whose state has meanwhile become
// stopped, or whose host process is gone, is NotFound too.
func (s *service) Kill(ctx context.Context, r *task.KillRequest) (*emptypb.Empty, error) {
	t := s.task(r.ID)
	if t != nil && t.lockForKill(ctx) {
		// Not during a checkpoint of the task (pausedkill.go).
		defer t.checkpointing.Unlock()
	}
	return s.kill(ctx, t, r)
}

// kill is Kill with no checkpoint of task t (nil: not this shim's) under
// way.
func (s *service) kill(ctx context.Context, t *gvxTask, r *task.KillRequest) (*emptypb.Empty, error) {
	if t != nil && t.paused.Load() && (r.ExecID == "" && syscall.Signal(r.Signal) == syscall.SIGKILL || r.ExecID != "" && uncatchable(r.Signal)) {
		// SIGKILL ends a paused task at once (as runc's thaw does), and
		// an exec's waiter would die and leave the guest process.
		return s.killPaused(ctx, t, r)
	}
	if s.killExecInGuest(ctx, r) {
		return &emptypb.Empty{}, nil
	}
	resp, err := s.TTRPCTaskService.Kill(ctx, r)
	if err == nil || errdefs.IsNotFound(errgrpc.ToNative(err)) {
		return resp, err
	}
	if t != nil && s.paused(ctx, r.ID) {
		return s.killPaused(ctx, t, r)
	}
	st, serr := s.TTRPCTaskService.State(ctx, &task.StateRequest{ID: r.ID, ExecID: r.ExecID})
	if serr == nil && (st.Status == tasktypes.Status_STOPPED || r.ExecID == "" && !procfs.Alive(int(st.Pid))) {
		return nil, errgrpc.ToGRPC(fmt.Errorf("process already finished: %w", errdefs.ErrNotFound))
	}
	return resp, err
}

// grpcError reports err to containerd as an error of kind (an errdefs
// class), keeping its message.
func grpcError(kind, err error) error {
	return errgrpc.ToGRPC(fmt.Errorf("%w: %v", kind, err))
}
