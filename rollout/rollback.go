package rollout

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/log"
)

// ErrForeignHandle means a handle is not of the sandbox's lineage.
var ErrForeignHandle = errors.New("checkpoint of another sandbox's lineage")

// Rollback returns sb to handle id's state: its backing is replaced by one
// restored from the handle (a ready spare if there is one: two control
// calls), under the same sandbox id; its output goes on to the same
// writers. The old backing is destroyed in the background.
func (e *Engine) Rollback(ctx context.Context, sb *Sandbox, id string) (time.Duration, error) {
	if err := e.Wait(ctx, id); err != nil {
		return 0, fmt.Errorf("rollback %s: %w", sb.ID, err)
	}
	h, done, err := e.use(id)
	if err != nil {
		return 0, fmt.Errorf("rollback %s: %w", sb.ID, err)
	}
	defer done()
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.cur == nil {
		return 0, fmt.Errorf("rollback %s: the sandbox was destroyed", sb.ID)
	}
	if err := sb.settle(); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx rollout: rollback %s: the previous rollback's labels", sb.ID)
	}
	if h.Lineage != sb.lineage {
		return 0, fmt.Errorf("rollback %s to %s: %w (made from %s)", sb.ID, id, ErrForeignHandle, h.Sandbox)
	}
	t0 := time.Now()
	next, err := e.acquire(ctx, h, sb.ID)
	if err != nil {
		return 0, fmt.Errorf("rollback %s: %w", sb.ID, err)
	}
	old := sb.cur
	// The new backing carries the sandbox's labels, so that a later
	// process finds it as the sandbox (Find): labelled while the old one
	// pauses and the new one resumes. containerd commits them to disk (an
	// fsync): with LazyLabels the rollback does not wait for it — the next
	// call on the sandbox does (settle), and the old backing is destroyed
	// only once it is done, so that until then Find finds the old one.
	p := &promotion{done: make(chan struct{})}
	go func(ctx context.Context) {
		defer close(p.done)
		var labels map[string]string
		if labels, p.err = old.container.Labels(ctx); p.err == nil {
			p.err = e.promote(ctx, next, sb.ID, h.ID, labels)
		}
	}(context.WithoutCancel(ctx)) // it outlives the call
	_ = e.pause(ctx, old) // no more output or work from it
	err = e.resume(ctx, next)
	if !e.opts.LazyLabels {
		<-p.done
		if err == nil && p.err != nil {
			err = p.err
			_ = e.pause(ctx, next)
		}
	}
	if err != nil {
		<-p.done
		_ = e.destroy(ctx, next)
		if old.paused {
			_ = e.resume(ctx, old)
		}
		return 0, fmt.Errorf("rollback %s: the restored sandbox: %w", sb.ID, err)
	}
	sb.cur, sb.parent = next, h.ID
	sb.promoting = p
	if err := e.moveDockerSocket(ctx, next, sb.ID); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx rollout: rollback %s", sb.ID)
	}
	if sb.stdout != nil {
		next.out.open(sb.stdout, sb.stderr)
	}
	took := time.Since(t0)
	e.background(ctx, "destroy the rolled-back "+old.id, func(ctx context.Context) error {
		<-p.done
		if p.err != nil {
			log.G(ctx).WithError(p.err).Warnf("gvx rollout: rollback %s: %s runs without the sandbox's labels: another process does not find it as the sandbox", sb.ID, next.id)
		}
		return e.destroy(ctx, old)
	})
	e.fillSpares(ctx, h)
	return took, nil
}

// Fork returns n new sandboxes in handle id's state, of its lineage. Their
// output is held back until Attach.
func (e *Engine) Fork(ctx context.Context, id string, n int) ([]*Sandbox, error) {
	if err := e.Wait(ctx, id); err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	h, done, err := e.use(id)
	if err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	defer done()
	if n < 1 {
		return nil, fmt.Errorf("fork %s: n = %d, want at least 1", id, n)
	}
	// Ready spares at once; the rest restored side by side, into the
	// lineage's ready restore targets while there are some.
	backings := make([]*backing, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range backings {
		if backings[i] = e.takeSpare(h.ID); backings[i] != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if backings[i] = e.fromTarget(ctx, h); backings[i] != nil {
				return
			}
			backings[i], errs[i] = e.restore(ctx, h, e.newID(h.Sandbox), true)
		}()
	}
	wg.Wait()
	err = errors.Join(errs...)
	for _, b := range backings {
		if b != nil && err == nil {
			err = e.resume(ctx, b)
		}
	}
	if err != nil {
		for _, b := range backings {
			if b != nil {
				_ = e.destroy(ctx, b)
			}
		}
		return nil, fmt.Errorf("fork %s: %w", id, err)
	}
	labels := e.forkLabels(h)
	out := make([]*Sandbox, n)
	for i, b := range backings {
		out[i] = &Sandbox{ID: b.id, e: e, cur: b, lineage: h.Lineage, parent: h.ID}
		if err == nil {
			err = e.promote(ctx, b, b.id, h.ID, labels)
		}
	}
	if err != nil {
		for _, b := range backings {
			_ = e.destroy(ctx, b)
		}
		return nil, fmt.Errorf("fork %s: %w", id, err)
	}
	for _, sb := range out {
		e.keep(sb)
	}
	e.fillSpares(ctx, h)
	return out, nil
}

// RestoreAs returns a new sandbox, containerd container id, in handle
// hid's state, of its lineage — a fork of one under an id of the
// caller's (no spare can stand in: a spare's id is the engine's). Its
// output is held back until Attach.
func (e *Engine) RestoreAs(ctx context.Context, hid, id string) (*Sandbox, error) {
	if err := e.Wait(ctx, hid); err != nil {
		return nil, fmt.Errorf("restore %s: %w", id, err)
	}
	h, done, err := e.use(hid)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", id, err)
	}
	defer done()
	b, err := e.restore(ctx, h, id, false)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", id, err)
	}
	labels := e.forkLabels(h)
	if err := e.promote(ctx, b, b.id, h.ID, labels); err != nil {
		_ = e.destroy(ctx, b)
		return nil, fmt.Errorf("restore %s: %w", id, err)
	}
	return e.keep(&Sandbox{ID: b.id, e: e, cur: b, lineage: h.Lineage, parent: h.ID}), nil
}

// forkLabels are the labels of h's checkpointed container a backing
// restored as a sandbox of its own (a fork, RestoreAs) inherits.
func (e *Engine) forkLabels(h *Handle) map[string]string {
	labels := map[string]string{}
	for k, v := range h.Labels {
		if e.opts.ForkLabel == nil || e.opts.ForkLabel(k) {
			labels[k] = v
		}
	}
	return labels
}

// acquire returns a paused backing in h's state: a ready spare, or one
// restored now, with its control connection.
func (e *Engine) acquire(ctx context.Context, h *Handle, base string) (*backing, error) {
	if b := e.takeSpare(h.ID); b != nil {
		return b, nil
	}
	if b := e.fromTarget(ctx, h); b != nil {
		return b, nil
	}
	b, err := e.restore(ctx, h, e.newID(base), true)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// moveDockerSocket puts the host socket of backing b's inner dockerd, if
// it has one its shim publishes, at sandbox id's path: the path clients of
// the sandbox know (Sandbox.DockerSocket, DOCKER_HOST) reaches the
// restored dockerd. The rename replaces the old backing's socket at once;
// its shim leaves the path alone (it is no longer its socket), and the
// engine removes it with the sandbox (Destroy).
func (e *Engine) moveDockerSocket(ctx context.Context, b *backing, id string) error {
	if b.id == id {
		return nil
	}
	ns := namespaceOf(ctx)
	from, to := e.layout.DockerSocket(ns, b.id), e.layout.DockerSocket(ns, id)
	if _, err := os.Lstat(from); errors.Is(err, os.ErrNotExist) {
		return nil // not docker mode, or its socket is the guest's own
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		return fmt.Errorf("docker socket: %w", err)
	}
	if err := os.Rename(from, to); err != nil {
		return fmt.Errorf("docker socket: %w", err)
	}
	return nil
}
