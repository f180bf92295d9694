package gvx

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"

	"github.com/gvxrun/gvx/internal/taskio"
	"github.com/gvxrun/gvx/rollout"
)

// Status is a sandbox's state.
type Status string

// Sandbox states, as containerd reports its task's.
const (
	StatusCreated Status = "created"
	StatusRunning Status = "running"
	StatusPaused  Status = "paused"
	StatusStopped Status = "stopped"
	StatusUnknown Status = "unknown"
)

// Run waits until the sandbox's init exits and its output is written, and
// returns its exit status (128+n for a death by signal n). After
// Config.Timeout it returns ErrTimeout (with 137); after the host's OOM
// killer ended the sandbox at its memory limit, ErrOOM (with 137). Run
// does not Close.
func (s *Sandbox) Run(ctx context.Context) (int, error) {
	select {
	case <-s.Exited():
	case <-ctx.Done():
		return -1, newError("run", s.id, nil, ctx.Err())
	}
	if s.curTask() != nil && s.curTask().IO() != nil {
		s.curTask().IO().Wait()
	}
	s.bmu.Lock()
	status := s.status
	s.bmu.Unlock()
	code := int(status.ExitCode())
	if err := status.Error(); err != nil {
		return code, newError("run", s.id, nil, err)
	}
	if s.oomKilled.Load() {
		return code, errorf("run", s.id, ErrOOM, "the sandbox was killed: out of memory (it reached its memory limit)")
	}
	if s.timedOut.Load() {
		return code, errorf("run", s.id, ErrTimeout, "the sandbox was stopped at the end of its %s timeout", s.cfg.Timeout)
	}
	return code, nil
}

// Exited is closed once the sandbox's init has exited.
func (s *Sandbox) Exited() <-chan struct{} {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	return s.exited
}

// hasExited says whether the sandbox's init has exited.
func (s *Sandbox) hasExited() bool {
	select {
	case <-s.Exited():
		return true
	default:
		return false
	}
}

// Signal sends sig to the sandbox's init.
func (s *Sandbox) Signal(ctx context.Context, sig syscall.Signal) error {
	if s.curTask() == nil {
		return newError("signal", s.id, ErrNotRunning, nil)
	}
	if err := s.curTask().Kill(s.c.Context(ctx), sig); err != nil {
		return newError("signal", s.id, nil, err)
	}
	return nil
}

// Resize sets the size of the init's terminal (Config.TTY).
func (s *Sandbox) Resize(ctx context.Context, cols, rows uint32) error {
	if s.curTask() == nil {
		return newError("resize", s.id, ErrNotRunning, nil)
	}
	if err := s.curTask().Resize(s.c.Context(ctx), cols, rows); err != nil {
		return newError("resize", s.id, nil, err)
	}
	return nil
}

// CloseStdin closes the init's standard input, ending the copy from
// Config.Stdin even while that reader is still open.
func (s *Sandbox) CloseStdin(ctx context.Context) error {
	if s.curTask() == nil {
		return newError("close stdin", s.id, ErrNotRunning, nil)
	}
	if s.initStdin != nil {
		if err := s.initStdin.Close(); err != nil {
			return newError("close stdin", s.id, nil, err)
		}
		return nil
	}
	if err := s.curTask().CloseIO(s.c.Context(ctx), client.WithStdinCloser); err != nil {
		return newError("close stdin", s.id, nil, err)
	}
	return nil
}

// Pause freezes every process of the sandbox; Resume thaws them.
func (s *Sandbox) Pause(ctx context.Context) error {
	if s.curTask() == nil {
		return newError("pause", s.id, ErrNotRunning, nil)
	}
	if err := s.curTask().Pause(s.c.Context(ctx)); err != nil {
		return newError("pause", s.id, nil, err)
	}
	return nil
}

// Resume thaws a paused sandbox.
func (s *Sandbox) Resume(ctx context.Context) error {
	if s.curTask() == nil {
		return newError("resume", s.id, ErrNotRunning, nil)
	}
	if err := s.curTask().Resume(s.c.Context(ctx)); err != nil {
		return newError("resume", s.id, nil, err)
	}
	return nil
}

// Status is the sandbox's state now.
func (s *Sandbox) Status(ctx context.Context) (Status, error) {
	if s.curTask() == nil {
		return StatusStopped, nil
	}
	st, err := s.curTask().Status(s.c.Context(ctx))
	if err != nil {
		if errdefs.IsNotFound(err) {
			return StatusStopped, nil
		}
		return StatusUnknown, newError("status", s.id, nil, err)
	}
	return statusOf(st.Status), nil
}

func statusOf(st client.ProcessStatus) Status {
	switch st {
	case client.Created:
		return StatusCreated
	case client.Running:
		return StatusRunning
	case client.Paused, client.Pausing:
		return StatusPaused
	case client.Stopped:
		return StatusStopped
	}
	return StatusUnknown
}

// Stats is a sandbox's resource use, from its host cgroup (gVisor's
// processes and the guest's together).
type Stats struct {
	CPUNanos    uint64 // CPU time used so far
	MemoryBytes uint64 // memory in use (including page cache)
	MemoryCache uint64 // of which page cache
	MemoryLimit uint64 // its cap (0 or huge: none)
	Pids        uint64 // host tasks (threads) now
}

// Stats reads the sandbox's resource use now.
func (s *Sandbox) Stats(ctx context.Context) (Stats, error) {
	if s.curTask() == nil {
		return Stats{}, newError("stats", s.id, ErrNotRunning, nil)
	}
	m, err := s.curTask().Metrics(s.c.Context(ctx))
	if err != nil {
		return Stats{}, newError("stats", s.id, nil, err)
	}
	data, err := typeurl.UnmarshalAny(m.Data)
	if err != nil {
		return Stats{}, newError("stats", s.id, nil, err)
	}
	var st Stats
	switch d := data.(type) {
	case *v1.Metrics:
		if d.CPU != nil && d.CPU.Usage != nil {
			st.CPUNanos = d.CPU.Usage.Total
		}
		if d.Memory != nil {
			st.MemoryCache = d.Memory.Cache
			if d.Memory.Usage != nil {
				st.MemoryBytes, st.MemoryLimit = d.Memory.Usage.Usage, d.Memory.Usage.Limit
			}
		}
		if d.Pids != nil {
			st.Pids = d.Pids.Current
		}
	case *v2.Metrics:
		if d.CPU != nil {
			st.CPUNanos = d.CPU.UsageUsec * 1000
		}
		if d.Memory != nil {
			st.MemoryBytes, st.MemoryLimit, st.MemoryCache = d.Memory.Usage, d.Memory.UsageLimit, d.Memory.File
		}
		if d.Pids != nil {
			st.Pids = d.Pids.Current
		}
	default:
		return Stats{}, errorf("stats", s.id, ErrUnsupported, "metrics of type %T", data)
	}
	return st, nil
}

// Close kills the sandbox and releases everything it holds: its task
// (the gVisor sandbox, its processes, mounts, cgroups), its container and
// snapshot, volume clones, published sockets and stdio fifos. It is
// idempotent and finishes even if ctx is cancelled.
func (s *Sandbox) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.closeErr = s.teardown(ctx)
		if s.onClose != nil {
			if err := s.onClose(ctx); err != nil && s.closeErr == nil {
				s.closeErr = err
			}
		}
	})
	return s.closeErr
}

// teardown removes whatever exists of the sandbox.
func (s *Sandbox) teardown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(s.c.Context(context.WithoutCancel(ctx)), 2*time.Minute)
	defer cancel()
	if s.timer != nil {
		s.timer.Stop()
	}
	var errs []error
	s.bmu.Lock()
	rs := s.rs
	s.bmu.Unlock()
	if rs != nil {
		// The engine's: its current backing (the first, or a restore).
		if err := s.c.eng.Destroy(ctx, rs); err != nil {
			errs = append(errs, err)
		}
		s.closeNewIO()
	} else if s.restored && s.container != nil {
		// Stopped, so not adopted: the engine removes it with its volumes.
		if err := s.c.removeRestored(ctx, s.container.ID()); err != nil {
			errs = append(errs, err)
		}
	} else if s.curTask() != nil {
		if err := s.killTask(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if s.container != nil {
		if err := s.container.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete container: %w", err))
		}
	}
	if err := s.releaseOwned(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return newError("close", s.id, nil, err)
	}
	return nil
}

// killDeleteAfter is how long killTask waits for the init to exit of its
// SIGKILL (and, past rollout.StuckAfter, of its kernel's resume) before it
// deletes the task all the same.
const killDeleteAfter = 30 * time.Second

// killTask kills the init (thawing a paused sandbox first), waits for it
// and deletes the task.
func (s *Sandbox) killTask(ctx context.Context) error {
	if st, err := s.curTask().Status(ctx); err == nil && (st.Status == client.Paused || st.Status == client.Pausing) {
		_ = s.curTask().Resume(ctx)
	}
	if ns, _ := namespaces.Namespace(ctx); rollout.OrphanedPause(s.c.cfg.StateDir, ns, s.container.ID()) {
		// Paused for a checkpoint by a process that died in it.
		if e, err := s.c.engine(); err == nil {
			if err := e.ResumeOrphaned(ctx, s.container.ID()); err != nil {
				log.G(ctx).WithError(err).Warnf("gvx: close %s", s.id)
			}
		}
	}
	select {
	case <-s.Exited():
	default:
		if err := s.curTask().Kill(ctx, syscall.SIGKILL, client.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).WithError(err).Debugf("gvx: close %s: kill", s.id)
		}
		// A kernel paused by a process that died before it marked the
		// pause (rollout.OrphanedPause) is resumed past StuckAfter.
		resume := func() {
			if e, err := s.c.engine(); err == nil {
				_ = e.ResumeStuck(ctx, s.container.ID())
			}
		}
		if s.watched && !rollout.AwaitKill(ctx, "gvx: close "+s.id, s.Exited(), resume, killDeleteAfter-rollout.StuckAfter) {
			log.G(ctx).Warnf("gvx: close %s: the init did not exit %s after SIGKILL; deleting the task anyway", s.id, killDeleteAfter)
		}
	}
	// The FIFOs of a task made by a process that died (this one
	// attached it) are this one's to remove; a task whose IO this process
	// holds removes its own at Delete.
	var fifos string
	if s.curTask().IO() == nil {
		fifos = taskio.FIFODir(ctx, s.c.ctrd, s.container.ID(), s.c.fifoDir)
	}
	if _, err := s.curTask().Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete task: %w", err)
	}
	if err := taskio.Remove(fifos); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx: close %s: its stdio FIFOs", s.id)
	}
	return nil
}

// cleanup undoes a New that failed half-way.
func (s *Sandbox) cleanup(ctx context.Context) {
	if err := s.teardown(ctx); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx: cleaning up sandbox %s after a failed create", s.id)
	}
}
