package gvx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/gvxrun/gvx/rollout"
)

// Checkpoint is a saved state of a sandbox: its processes' memory, file
// descriptors, pipes and sockets, its root filesystem's writes and its
// volumes, taken at one paused instant (docs/checkpoint.md).
type Checkpoint struct {
	// ID names it; Rollback and Fork take it.
	ID string
	// Parent is the checkpoint the state descends from ("" for a
	// sandbox's first): checkpoints form a tree.
	Parent string
	// Sandbox is the id of the sandbox it was taken of.
	Sandbox string
	Created time.Time
	// Paused is how long the sandbox was paused for it (0 until saved).
	Paused time.Duration
}

// CheckpointOptions tune Sandbox.Checkpoint.
type CheckpointOptions struct {
	// Async returns once the sandbox is paused: the save goes on with
	// the sandbox paused, and the sandbox's next call (or a Rollback or
	// Fork to the checkpoint) waits until it is done. An RL loop whose
	// agent then waits for its model pays the pause, not the save.
	Async bool
}

func checkpointOf(h *rollout.Handle) Checkpoint {
	return Checkpoint{ID: h.ID, Parent: h.Parent, Sandbox: h.Sandbox, Created: h.Created, Paused: h.Paused}
}

// engine is the client's rollout engine, made on first use.
func (c *Client) engine() (*rollout.Engine, error) {
	c.engOnce.Do(func() {
		dir := c.opts.CheckpointDir
		if dir == "" {
			dir = filepath.Join(c.opts.DataDir, "checkpoints")
		}
		c.eng, c.engErr = rollout.New(c.ctrd, rollout.Options{StoreDir: dir, StateDir: c.cfg.StateDir, Spares: c.opts.Spares, LazyLabels: c.opts.LazyLabels, NoDedupe: c.opts.NoDedupe, NoTargets: c.opts.NoRestoreTargets, FIFODir: c.fifoDir,
			// A fork owns none of its parent's host files.
			ForkLabel: func(k string) bool { return k != LabelOwned && k != LabelPool }})
		if c.engErr != nil {
			c.engErr = errorf("checkpoint", "", ErrInvalid, "Options.CheckpointDir %s, Spares %d: %w", dir, c.opts.Spares, c.engErr)
		}
	})
	return c.eng, c.engErr
}

// rollout is the engine's sandbox for s, adopting s on first use.
func (s *Sandbox) rollout(ctx context.Context) (*rollout.Engine, *rollout.Sandbox, error) {
	e, err := s.c.engine()
	if err != nil {
		return nil, nil, err
	}
	s.bmu.Lock()
	defer s.bmu.Unlock()
	if s.rs == nil {
		if s.task == nil {
			return nil, nil, newError("checkpoint", s.id, ErrNotRunning, nil)
		}
		rs, err := e.Adopt(ctx, s.container.ID())
		if err != nil {
			return nil, nil, newError("checkpoint", s.id, nil, err)
		}
		stdout, stderr := s.cfg.Stdout, s.cfg.Stderr
		if stdout == nil {
			stdout = io.Discard
		}
		if stderr == nil {
			stderr = io.Discard
		}
		rs.Attach(stdout, stderr)
		s.rs = rs
	}
	return e, s.rs, nil
}

// Checkpoint saves the sandbox's whole state. The sandbox runs on
// afterwards (with Async, once the save is done). Refused, the sandbox
// running on untouched, for what gVisor or gvx cannot save: docker mode and
// published unix sockets (host sockets), sandboxes of image pools (the
// SDK's pools), a host network.
func (s *Sandbox) Checkpoint(ctx context.Context, o CheckpointOptions) (Checkpoint, error) {
	if s.c.isClosed() {
		return Checkpoint{}, newError("checkpoint", s.id, ErrClosed, nil)
	}
	ctx = s.c.Context(ctx)
	e, rs, err := s.rollout(ctx)
	if err != nil {
		return Checkpoint{}, err
	}
	var h *rollout.Handle
	if o.Async {
		h, err = e.CheckpointAsync(ctx, rs)
	} else {
		h, err = e.Checkpoint(ctx, rs)
	}
	if err != nil {
		kind := kindOf(err)
		if errors.Is(err, rollout.ErrNotCheckpointable) {
			kind = ErrUnsupported
		}
		return Checkpoint{}, newError("checkpoint", s.id, kind, err)
	}
	return checkpointOf(h), nil
}

// Rollback returns the sandbox to checkpoint id, which must be of its
// tree (ErrInvalid otherwise): processes, files and volumes as they were
// then. The sandbox keeps its ID, its Exec, files and Close calls go to
// the restored state, and its init's output goes on to Config's writers.
// With Options.Spares, a restored sandbox waits ready and the rollback is
// two control calls (≈ 1 ms); without, it is a restore (≈ 0.2–0.5 s). A
// sandbox whose init has exited can be rolled back too: it runs again.
func (s *Sandbox) Rollback(ctx context.Context, id string) error {
	if s.c.isClosed() {
		return newError("rollback", s.id, ErrClosed, nil)
	}
	ctx = s.c.Context(ctx)
	e, rs, err := s.rollout(ctx)
	if err != nil {
		return err
	}
	s.swap.Lock()
	if _, err := e.Rollback(ctx, rs, id); err != nil {
		s.swap.Unlock()
		kind := kindOf(err)
		if errors.Is(err, rollout.ErrForeignHandle) {
			kind = ErrInvalid
		} else if errors.Is(err, rollout.ErrUnknownHandle) {
			kind = ErrNotFound
		}
		return newError("rollback", s.id, kind, err)
	}
	s.bmu.Lock()
	s.container, s.task = rs.Container(), rs.Task()
	select {
	case <-s.exited:
		// It runs again: a new exit to wait for.
		s.exited = make(chan struct{})
	default:
	}
	s.bmu.Unlock()
	s.swap.Unlock()
	s.closeNewIO()
	return s.watch(ctx)
}

// closeNewIO closes the stdio of the task New created once the rollout
// engine owns that task (a rollback replaced it, or the engine destroys
// it): the engine deletes it by its id, without this process's IO, and it
// is the IO's close that removes its FIFO directory (empty when the
// sandbox has no stdio writers).
func (s *Sandbox) closeNewIO() {
	s.bmu.Lock()
	io := s.newIO
	s.newIO = nil
	s.bmu.Unlock()
	if io != nil {
		io.Cancel()
		_ = io.Close()
	}
}

// Fork makes n new sandboxes in checkpoint id's state, each with volumes
// of its own; they diverge from there. Their init's output is discarded
// (Exec's is returned as usual); Close each when done.
func (c *Client) Fork(ctx context.Context, id string, n int) ([]*Sandbox, error) {
	if c.isClosed() {
		return nil, newError("fork", id, ErrClosed, nil)
	}
	if n < 1 {
		return nil, errorf("fork", id, ErrInvalid, "n = %d: want 1 or more", n)
	}
	e, err := c.engine()
	if err != nil {
		return nil, err
	}
	ctx = c.Context(ctx)
	rss, err := e.Fork(ctx, id, n)
	if err != nil {
		kind := kindOf(err)
		if errors.Is(err, rollout.ErrUnknownHandle) {
			kind = ErrNotFound
		}
		return nil, newError("fork", id, kind, err)
	}
	out := make([]*Sandbox, 0, len(rss))
	for i, rs := range rss {
		s, err := c.restoredSandbox(ctx, rs)
		if err != nil {
			for _, rest := range rss[i:] {
				_ = e.Destroy(ctx, rest)
			}
			for _, made := range out {
				_ = made.Close(ctx)
			}
			return nil, newError("fork", id, nil, fmt.Errorf("fork %d of %d: %w", i+1, n, err))
		}
		out = append(out, s)
	}
	return out, nil
}

// Restore makes sandbox id (a new container) in checkpoint ckID's state,
// with volumes of its own: Fork of one under an id of the caller's (a
// restore then, never a ready spare). Its init's output is discarded;
// Close it when done.
func (c *Client) Restore(ctx context.Context, ckID, id string) (*Sandbox, error) {
	if c.isClosed() {
		return nil, newError("restore", id, ErrClosed, nil)
	}
	if id == "" {
		return nil, errorf("restore", ckID, ErrInvalid, "no sandbox id given")
	}
	e, err := c.engine()
	if err != nil {
		return nil, err
	}
	ctx = c.Context(ctx)
	rs, err := e.RestoreAs(ctx, ckID, id)
	if err != nil {
		kind := kindOf(err)
		if errors.Is(err, rollout.ErrUnknownHandle) {
			kind = ErrNotFound
		}
		return nil, newError("restore", id, kind, err)
	}
	s, err := c.restoredSandbox(ctx, rs)
	if err != nil {
		_ = e.Destroy(ctx, rs)
		return nil, newError("restore", id, nil, err)
	}
	return s, nil
}

// restoredSandbox is the Sandbox of rs, a sandbox the engine restored (a
// fork, a Restore): its init's output discarded, its exit watched.
func (c *Client) restoredSandbox(ctx context.Context, rs *rollout.Sandbox) (*Sandbox, error) {
	rs.Attach(io.Discard, io.Discard)
	s := &Sandbox{c: c, id: rs.ID, exited: make(chan struct{}), rs: rs, container: rs.Container(), task: rs.Task()}
	err := s.load(ctx)
	if err == nil {
		err = s.watch(ctx)
	}
	return s, err
}

// Checkpoints lists the checkpoints in the client's store.
func (c *Client) Checkpoints(ctx context.Context) ([]Checkpoint, error) {
	e, err := c.engine()
	if err != nil {
		return nil, err
	}
	hs, err := e.Store().List()
	if err != nil {
		return nil, newError("list checkpoints", "", nil, err)
	}
	out := make([]Checkpoint, 0, len(hs))
	for _, h := range hs {
		out = append(out, checkpointOf(h))
	}
	return out, nil
}

// ReleaseCheckpoint deletes checkpoint id and its spares; sandboxes
// restored from it are unaffected.
func (c *Client) ReleaseCheckpoint(ctx context.Context, id string) error {
	e, err := c.engine()
	if err != nil {
		return err
	}
	if err := e.Release(c.Context(ctx), id); err != nil {
		kind := kindOf(err)
		if errors.Is(err, rollout.ErrUnknownHandle) {
			kind = ErrNotFound
		}
		return newError("release checkpoint", id, kind, err)
	}
	return nil
}
