package gvxbackend

import (
	"context"
	"errors"
	"fmt"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/serve/backend"
)

// Checkpoint saves the sandbox (gvx.Sandbox.Checkpoint).
func (s *sandbox) Checkpoint(ctx context.Context, async bool) (backend.Checkpoint, error) {
	ck, err := s.sb.Checkpoint(ctx, gvx.CheckpointOptions{Async: async})
	if err != nil {
		return backend.Checkpoint{}, ckError(err)
	}
	return backend.Checkpoint{ID: ck.ID, Parent: ck.Parent, Created: ck.Created}, nil
}

// Rollback returns the sandbox to checkpoint id.
func (s *sandbox) Rollback(ctx context.Context, id string) error {
	return ckError(s.sb.Rollback(ctx, id))
}

// Fork makes n sandboxes from checkpoint id.
func (b *Backend) Fork(ctx context.Context, id string, n int) ([]backend.Sandbox, error) {
	sbs, err := b.c.Fork(ctx, id, n)
	if err != nil {
		return nil, ckError(err)
	}
	out := make([]backend.Sandbox, len(sbs))
	for i, sb := range sbs {
		out[i] = &sandbox{sb: sb}
	}
	return out, nil
}

// ReleaseCheckpoint deletes checkpoint id.
func (b *Backend) ReleaseCheckpoint(ctx context.Context, id string) error {
	return ckError(b.c.ReleaseCheckpoint(ctx, id))
}

// Checkpoints lists the checkpoints in the SDK's store.
func (b *Backend) Checkpoints(ctx context.Context) ([]string, error) {
	cks, err := b.c.Checkpoints(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(cks))
	for i, ck := range cks {
		ids[i] = ck.ID
	}
	return ids, nil
}

// ckError gives an SDK error the backend's kind for the service.
func ckError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, gvx.ErrNotFound):
		return fmt.Errorf("%w: %v", backend.ErrNoCheckpoint, err)
	case errors.Is(err, gvx.ErrInvalid):
		return fmt.Errorf("%w: %v", backend.ErrForeignCheckpoint, err)
	case errors.Is(err, gvx.ErrUnsupported):
		return fmt.Errorf("%w: %v", backend.ErrNotCheckpointable, err)
	}
	return err
}
