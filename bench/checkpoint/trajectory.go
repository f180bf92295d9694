package main

import (
	"context"
	"fmt"
	"math/rand"
	"time"

	"github.com/gvxrun/gvx/rollout"
)

// trajectory runs a DeltaBox-style tree search: steps expansions, each a
// checkpoint, the agent's model thinking for think, and a step of work in
// the sandbox; about half the expansions first roll back to one of the
// last few checkpoints. It reports the share of wall time spent in the
// engine's calls on the loop's path.
func (x *env) trajectory(ctx context.Context, steps int, think time.Duration) (retErr error) {
	e, dir, err := x.engine(rollout.Options{Spares: 1})
	if err != nil {
		return err
	}
	_ = dir
	defer func() {
		if err := e.Close(ctx); err != nil && retErr == nil {
			retErr = err
		}
	}()
	if err := x.start(ctx, "traj", guest(16), nil, ""); err != nil {
		return err
	}
	sb, err := e.Adopt(ctx, "traj")
	if err != nil {
		return err
	}
	defer e.Destroy(ctx, sb)
	rng := rand.New(rand.NewSource(1))
	var handles []*rollout.Handle
	var inEngine, rollbacks, work time.Duration
	nRollbacks := 0
	start := time.Now()
	for i := 0; i < steps; i++ {
		if len(handles) > 1 && nRollbacks < steps*49/100 && rng.Intn(2) == 0 {
			h := handles[len(handles)-1-rng.Intn(min(len(handles), 4))]
			t0 := time.Now()
			if _, err := e.Rollback(ctx, sb, h.ID); err != nil {
				return err
			}
			d := time.Since(t0)
			inEngine += d
			rollbacks += d
			nRollbacks++
		}
		t0 := time.Now()
		h, err := e.CheckpointAsync(ctx, sb)
		if err != nil {
			return err
		}
		inEngine += time.Since(t0)
		handles = append(handles, h)
		if len(handles) > 4 {
			if err := e.Release(ctx, handles[0].ID); err != nil {
				return err
			}
			handles = handles[1:]
		}
		time.Sleep(think) // the model
		t1 := time.Now()
		// The agent's step: real work in the sandbox (it waits for the
		// save to end first, if the model was quicker).
		if _, err := execOut(ctx, sb.Task(), "sh", "-c", "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; echo $i > /tmp/step"); err != nil {
			return err
		}
		work += time.Since(t1)
	}
	wall := time.Since(start)
	fmt.Printf("\ntrajectory: %d expansions, %d rollbacks, model %s per step; wall %s\n", steps, nRollbacks, think, wall.Round(time.Millisecond))
	fmt.Printf("  in checkpoint/rollback calls: %s (%.2f %% of wall; rollbacks %s), agent work %s\n",
		inEngine.Round(time.Millisecond), 100*float64(inEngine)/float64(wall), rollbacks.Round(time.Millisecond), work.Round(time.Millisecond))
	for _, h := range handles {
		_ = e.Release(ctx, h.ID)
	}
	return nil
}
