package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
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
	h, err := e.store.Get(id)
	if err != nil {
		return 0, fmt.Errorf("rollback %s: %w", sb.ID, err)
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.cur == nil {
		return 0, fmt.Errorf("rollback %s: the sandbox was destroyed", sb.ID)
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
	_ = e.pause(ctx, old) // no more output or work from it
	if err := e.resume(ctx, next); err != nil {
		_ = e.destroy(ctx, next)
		if old.paused {
			_ = e.resume(ctx, old)
		}
		return 0, fmt.Errorf("rollback %s: the restored sandbox: %w", sb.ID, err)
	}
	sb.cur, sb.parent = next, h.ID
	if sb.stdout != nil {
		next.out.open(sb.stdout, sb.stderr)
	}
	took := time.Since(t0)
	e.background(ctx, "destroy the rolled-back "+old.id, func(ctx context.Context) error { return e.destroy(ctx, old) })
	e.fillSpares(ctx, h)
	return took, nil
}

// Fork returns n new sandboxes in handle id's state, of its lineage. Their
// output is held back until Attach.
func (e *Engine) Fork(ctx context.Context, id string, n int) ([]*Sandbox, error) {
	if err := e.Wait(ctx, id); err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	h, err := e.store.Get(id)
	if err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	if n < 1 {
		return nil, fmt.Errorf("fork %s: n = %d, want at least 1", id, n)
	}
	// Ready spares at once; the rest restored side by side.
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
	out := make([]*Sandbox, n)
	for i, b := range backings {
		out[i] = &Sandbox{ID: b.id, e: e, cur: b, lineage: h.Lineage, parent: h.ID}
	}
	e.fillSpares(ctx, h)
	return out, nil
}

// acquire returns a paused backing in h's state: a ready spare, or one
// restored now, with its control connection.
func (e *Engine) acquire(ctx context.Context, h *Handle, base string) (*backing, error) {
	if b := e.takeSpare(h.ID); b != nil {
		return b, nil
	}
	b, err := e.restore(ctx, h, e.newID(base), true)
	if err != nil {
		return nil, err
	}
	return b, nil
}
