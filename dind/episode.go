package dind

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/internal/loopdev"
	"github.com/gvxrun/gvx/volume"
)

// Episode is one RL episode: a docker-mode sandbox on its own clone of a
// golden volume.
type Episode struct {
	*Sandbox
	// Clone is how long cloning the golden volume took, and Method how
	// (zero for an episode restored from a golden checkpoint, whose
	// volume is its checkpoint's copy, removed with the sandbox).
	Clone  time.Duration
	Method volume.Method
	// Restored is how long the restore from a golden checkpoint took
	// (RestoreEpisode: Up and Ready include it).
	Restored time.Duration
}

// RestoreEpisode starts an episode restored from golden checkpoint ck
// (CheckpointGolden, in r.Client's checkpoint store) instead of booting
// dockerd: processes, memory and /var/lib/docker as at the checkpoint,
// on a volume copy of its own. With id "" the sandbox's id is the
// engine's and a ready spare (Options.Spares) may stand in (a rollout
// Fork: two control calls); with an id it is restored then (Client.Restore).
func (r *Runner) RestoreEpisode(ctx context.Context, id, ck string) (*Episode, error) {
	t0 := time.Now()
	var sb *gvx.Sandbox
	if id == "" {
		sbs, err := r.Client.Fork(ctx, ck, 1)
		if err != nil {
			return nil, fmt.Errorf("episode from %s: %w", ck, err)
		}
		sb = sbs[0]
	} else {
		var err error
		if sb, err = r.Client.Restore(ctx, ck, id); err != nil {
			return nil, fmt.Errorf("episode %s: %w", id, err)
		}
	}
	restored := time.Since(t0)
	d := NewDocker(sb.DockerSocket())
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	err := d.WaitReady(wctx, nil)
	cancel()
	if err != nil {
		_ = sb.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("episode %s restored from %s: %w", sb.ID(), ck, err)
	}
	s := &Sandbox{ID: sb.ID(), SDK: sb, Docker: d, Up: restored, Ready: time.Since(t0)}
	return &Episode{Sandbox: s, Restored: restored}, nil
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
