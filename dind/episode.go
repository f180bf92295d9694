package dind

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gvxrun/gvx/internal/loopdev"
	"github.com/gvxrun/gvx/volume"
)

// Episode is one RL episode: a docker-mode sandbox on its own clone of a
// golden volume.
type Episode struct {
	*Sandbox
	// Clone is how long cloning the golden volume took, and Method how.
	Clone  time.Duration
	Method volume.Method
}

// StartEpisode clones golden to vol (which must not exist) and starts
// sandbox id on it. If anything fails, the clone is removed.
func (r *Runner) StartEpisode(ctx context.Context, id, image, golden, vol string) (_ *Episode, retErr error) {
	t0 := time.Now()
	m, err := volume.Clone(ctx, golden, vol, volume.CloneOptions{})
	if err != nil {
		return nil, fmt.Errorf("episode %s: %w", id, err)
	}
	clone := time.Since(t0)
	defer func() {
		if retErr != nil {
			_ = os.Remove(vol)
		}
	}()
	sb, err := r.Start(ctx, id, image, vol)
	if err != nil {
		return nil, fmt.Errorf("episode %s: %w", id, err)
	}
	sb.Up += clone
	sb.Ready += clone
	return &Episode{Sandbox: sb, Clone: clone, Method: m}, nil
}

// Close ends the episode at once and removes its volume unless keep.
func (e *Episode) Close(ctx context.Context, keep bool) error {
	if err := e.Kill(ctx); err != nil {
		return err
	}
	if keep || e.Volume == "" {
		return nil
	}
	if err := loopdev.WaitDetached(ctx, e.Volume); err != nil {
		return fmt.Errorf("episode %s: %w", e.ID, err)
	}
	if err := os.Remove(e.Volume); err != nil {
		return fmt.Errorf("episode %s: remove volume: %w", e.ID, err)
	}
	return nil
}
