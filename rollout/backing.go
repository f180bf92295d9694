package rollout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/internal/loopdev"
	"github.com/gvxrun/gvx/internal/taskio"
	"github.com/gvxrun/gvx/sandbox/control"
)

// backing is the containerd container and task a sandbox (or a spare)
// runs as.
type backing struct {
	id        string
	container client.Container
	task      client.Task
	ctl       *control.Client
	// out holds back a restored backing's output until it is promoted
	// (nil for an adopted one, whose IO is its creator's).
	out *gate
	// restored says the engine made it (its volumes are the store's, in
	// volDir).
	restored bool
	volDir   string
	// paused says the engine paused its kernel (containerd does not
	// know: its task is still "running").
	paused bool
}

// pause pauses b's kernel through its control connection, and marks the
// pause (api.SentryRoot.EnginePaused) for a later process should this one
// die before its resume.
func (e *Engine) pause(ctx context.Context, b *backing) error {
	ctl, err := e.control(ctx, b)
	if err == nil {
		err = ctl.Pause()
	}
	if err != nil {
		return fmt.Errorf("pause %s: %w", b.id, err)
	}
	b.paused = true
	if err := os.WriteFile(e.pauseMark(ctx, b.id), []byte(owner), 0o600); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx rollout: mark %s paused", b.id)
	}
	return nil
}

// resume undoes the engine's pause of b.
func (e *Engine) resume(ctx context.Context, b *backing) error {
	mark := e.pauseMark(ctx, b.id)
	_ = os.Remove(mark)
	ctl, err := e.control(ctx, b)
	if err == nil {
		err = ctl.Resume()
	}
	if err != nil {
		if b.paused {
			_ = os.WriteFile(mark, []byte(owner), 0o600)
		}
		return fmt.Errorf("resume %s: %w", b.id, err)
	}
	b.paused = false
	return nil
}

// resumeOrphaned resumes b's kernel if an engine whose process is gone
// paused it (a crash in a checkpoint's save, or before a rollback
// resumed its spare): nothing else would.
func (e *Engine) resumeOrphaned(ctx context.Context, b *backing) error {
	if !e.pausedByGone(ctx, b.id) {
		return nil
	}
	log.G(ctx).Infof("gvx rollout: resuming %s, paused by a process that ended before resuming it", b.id)
	b.paused = true
	return e.resume(ctx, b)
}

// ResumeOrphaned resumes the kernel of the sandbox of containerd
// container id (in ctx's namespace) if an engine whose process is gone
// paused it (OrphanedPause).
func (e *Engine) ResumeOrphaned(ctx context.Context, id string) error {
	b := &backing{id: id}
	err := e.resumeOrphaned(ctx, b)
	e.closeControl(b)
	return err
}

// ResumeStuck resumes the kernel of the sandbox of containerd container
// id whatever marks say: for a task that a SIGKILL has not ended, taken
// for one paused by a process that died before it could mark the pause.
// Should the kernel not be paused after all, its Sentry ends, which ends
// the task as well.
func (e *Engine) ResumeStuck(ctx context.Context, id string) error {
	// Not taken for paused: a resume that fails (a Sentry going) must not
	// leave a mark of a pause nobody knows of (resume marks again what it
	// could not resume), which the next process would take for this one's
	// and try again.
	b := &backing{id: id}
	err := e.resume(ctx, b)
	e.closeControl(b)
	// Which it was, for the record: gVisor answers a resume of a paused
	// kernel, and ends the Sentry (the call fails) for one that was not.
	if err == nil {
		log.G(ctx).Warnf("gvx rollout: %s was paused, with no mark: resumed", id)
	} else {
		log.G(ctx).WithError(err).Warnf("gvx rollout: %s was not paused (or its sandbox is going): its resume failed", id)
	}
	return err
}

// OrphanedPause says whether an engine whose process is gone paused the
// kernel of the sandbox of container ns/id, on a node whose gvx state
// directory is stateDir (without an engine: a client that never made
// one checks with this before it kills a sandbox).
func OrphanedPause(stateDir, ns, id string) bool {
	mark := api.SentryRoot(filepath.Join(api.Layout{Dir: stateDir}.SentryRoot(id), ns)).EnginePaused(id)
	data, err := os.ReadFile(mark)
	return err == nil && !procfs.Running(string(data))
}

// closeControl closes b's control connection, if open: a sandbox that
// is shutting down waits for its control clients to go (gVisor's
// control-rpc-stop-timeout, 15 s).
func (e *Engine) closeControl(b *backing) {
	if b.ctl != nil {
		b.ctl.Close()
		b.ctl = nil
	}
}

// pauseMark is where a pause of backing id by the engine is marked.
func (e *Engine) pauseMark(ctx context.Context, id string) string {
	return api.SentryRoot(filepath.Join(e.layout.SentryRoot(id), namespaceOf(ctx))).EnginePaused(id)
}

// pausedByGone says whether backing id's kernel was paused by an engine
// whose process is gone (so that nothing will resume it); such a pause is
// this engine's to undo.
func (e *Engine) pausedByGone(ctx context.Context, id string) bool {
	return OrphanedPause(e.layout.Dir, namespaceOf(ctx), id)
}

// control returns the backing's control connection, dialling it first.
func (e *Engine) control(ctx context.Context, b *backing) (*control.Client, error) {
	if b.ctl != nil {
		return b.ctl, nil
	}
	sock, err := e.controlSocket(namespaceOf(ctx), b.id)
	if err != nil {
		return nil, err
	}
	if b.ctl, err = control.Dial(sock); err != nil {
		return nil, err
	}
	return b.ctl, nil
}

// destroy kills and deletes b's task and container, and removes the
// volumes the engine made for it.
func (e *Engine) destroy(ctx context.Context, b *backing) error {
	var errs []error
	if b.out != nil {
		b.out.close() // nothing more of it reaches the sandbox's writers
	}
	if b.paused || e.pausedByGone(ctx, b.id) {
		// A paused kernel must run for its tasks to die of SIGKILL.
		_ = e.resume(ctx, b)
	}
	e.closeControl(b)
	if b.task != nil {
		// A task created with no process of its own to start (a pool
		// sandbox's restore whose start never came: its process is its
		// sandbox's) has no exit to wait for: it is deleted as it is.
		created := false
		if st, err := b.task.Status(ctx); err == nil {
			switch st.Status {
			case client.Paused:
				_ = b.task.Resume(ctx)
			case client.Created:
				created = b.task.Pid() == 0
			}
		}
		if !created {
			if err := e.kill(ctx, b); err != nil {
				errs = append(errs, err)
			}
		}
		// Its FIFOs, when a process that died made them (a backing
		// adopted from an earlier one), are removed here; a task whose IO
		// this process holds removes its own at Delete.
		var fifos string
		if b.task.IO() == nil {
			fifos = taskio.FIFODir(ctx, e.c, b.id, e.opts.FIFODir)
		}
		defer func() {
			if err := taskio.Remove(fifos); err != nil {
				log.G(ctx).WithError(err).Warnf("rollout: the stdio FIFOs of %s", b.id)
			}
		}()
		// gVisor's delete waits 5 s for the gofer to exit; on a loaded
		// node that is not always enough: try again before giving up.
		var opts []client.ProcessDeleteOpts
		if !created {
			opts = append(opts, client.WithProcessKill)
		}
		for attempt := 1; ; attempt++ {
			_, err := b.task.Delete(ctx, opts...)
			if errdefs.IsNotFound(err) && b.task.IO() != nil {
				// Removed behind the engine (`gvx gc` of what it took
				// for an orphan): containerd's client then leaves the
				// IO this process made, whose Close removes its FIFOs.
				io := b.task.IO()
				io.Cancel()
				if cerr := io.Close(); cerr != nil {
					log.G(ctx).WithError(cerr).Warnf("rollout: the stdio FIFOs of %s", b.id)
				}
			}
			if err == nil || errdefs.IsNotFound(err) {
				break
			}
			if attempt == 3 {
				errs = append(errs, fmt.Errorf("delete task %s: %w", b.id, err))
				break
			}
			time.Sleep(time.Second)
		}
	}
	if b.container != nil {
		if err := b.container.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete container %s: %w", b.id, err))
		}
	}
	if b.restored {
		// The volume copies' loop devices detach once the sandbox is
		// gone (autoclear); removing the files first would leave them
		// holding deleted files and the store's filesystem busy.
		dir := b.volDir
		if dir == "" {
			dir = e.store.volumeDir(b.id)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.ext4"))
		for _, f := range files {
			if err := loopdev.WaitDetached(ctx, f); err != nil {
				errs = append(errs, fmt.Errorf("volume %s of %s: %w", f, b.id, err))
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// StuckAfter is how long a SIGKILL may take to end a task before its
// kernel is taken for one paused by a process that died. Under load a
// pool sandbox's task has taken more than 5 s to exit (its resume then
// found the Sentry going), so not less than that.
const StuckAfter = 10 * time.Second

// kill kills b's task with SIGKILL and waits for it to exit (AwaitKill).
func (e *Engine) kill(ctx context.Context, b *backing) error {
	wait, werr := b.task.Wait(ctx)
	if err := b.task.Kill(ctx, syscall.SIGKILL, client.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("kill %s: %w", b.id, err)
	}
	if werr != nil {
		return nil
	}
	resume := func() { _ = e.ResumeStuck(ctx, b.id) }
	if !AwaitKill(ctx, "gvx rollout: "+b.id, wait, resume, 5*time.Second) {
		return fmt.Errorf("%s did not exit after SIGKILL", b.id)
	}
	return nil
}

// AwaitKill waits for a task sent SIGKILL to exit (exited yields or is
// closed). A kernel that lets nothing die for StuckAfter is taken for one
// paused by a process that died before it marked the pause: resume
// resumes it (Engine.ResumeStuck) — which, should it not be paused after
// all, ends its Sentry, which ends the task as well — and the task gets
// last more. It reports whether the task exited; name says whose task in
// the log.
func AwaitKill[T any](ctx context.Context, name string, exited <-chan T, resume func(), last time.Duration) bool {
	select {
	case <-exited:
		return true
	case <-time.After(StuckAfter):
	}
	log.G(ctx).Warnf("%s: the task did not exit %s after SIGKILL; resuming its kernel, perhaps paused by a process that died", name, StuckAfter)
	resume()
	select {
	case <-exited:
		return true
	case <-time.After(last):
		return false
	}
}

// gate is a restored backing's output: held back until open, then passed
// through.
type gate struct {
	mu             sync.Mutex
	stdout, stderr io.Writer // nil until open
	held           []held
	heldBytes      int
}

type held struct {
	err  bool
	data []byte
}

// maxHeld bounds what a gate holds back; beyond it, output is dropped
// (a spare is paused right after its restore: it writes little).
const maxHeld = 1 << 20

func (g *gate) writer(isErr bool) io.Writer { return gateWriter{g, isErr} }

type gateWriter struct {
	g     *gate
	isErr bool
}

func (w gateWriter) Write(p []byte) (int, error) {
	g := w.g
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case w.isErr && g.stderr != nil:
		return g.stderr.Write(p)
	case !w.isErr && g.stdout != nil:
		return g.stdout.Write(p)
	}
	if g.heldBytes+len(p) <= maxHeld {
		g.held = append(g.held, held{w.isErr, bytes.Clone(p)})
		g.heldBytes += len(p)
	}
	return len(p), nil
}

// open passes output through to stdout and stderr from now on, after what
// was held back.
func (g *gate) open(stdout, stderr io.Writer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, h := range g.held {
		if h.err {
			_, _ = stderr.Write(h.data)
		} else {
			_, _ = stdout.Write(h.data)
		}
	}
	g.held, g.heldBytes = nil, 0
	g.stdout, g.stderr = stdout, stderr
}

// close drops what is held back and discards what comes.
func (g *gate) close() { g.open(io.Discard, io.Discard) }
