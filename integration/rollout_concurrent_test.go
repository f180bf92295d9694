package integration

import (
	"errors"
	"fmt"
	"math/rand"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gvxrun/gvx/rollout"
)

// TestRolloutConcurrent: one engine driven from several goroutines at
// once, as a tree search's workers do — checkpoints, rollbacks to any
// handle, forks and releases of one sandbox with a volume. A release of a
// handle that a fork is restoring from waits for the fork (which then
// succeeds) or comes first (the fork then finds the handle released);
// before, the fork failed in gVisor with its image gone ("opening state
// file … no such file or directory"). Every error is one of those, the
// sandbox runs on, and nothing is left behind.
func TestRolloutConcurrent(t *testing.T) {
	checkNoLeaks(t)
	eng, ctx, dir := rolloutEnvWith(t, rollout.Options{})
	img := filepath.Join(dir, "ws.ext4")
	gvx(t, "volume", "create", "--size", "64M", img)
	sb := adoptRunning(t, eng, ctx, "concurrent", volMount(img, "/work"), "sh", "-c",
		"n=0; while true; do n=$((n+1)); echo $n > /tmp/n; echo $n > /work/n; sleep 0.05; done")

	// A release while a fork restores from the handle.
	var forked, refused int
	for i := 0; i < 5; i++ {
		h, err := eng.Checkpoint(ctx, sb)
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			forks []*rollout.Sandbox
			err   error
		}
		fork := make(chan result, 1)
		go func() {
			f, err := eng.Fork(ctx, h.ID, 1)
			fork <- result{f, err}
		}()
		time.Sleep(time.Duration(i) * 5 * time.Millisecond)
		if err := eng.Release(ctx, h.ID); err != nil {
			t.Errorf("release %s while a fork restores from it: %v", h.ID, err)
		}
		r := <-fork
		switch {
		case r.err == nil:
			forked++
			// The loop truncates /work/n before it writes it: a checkpoint
			// between the two holds it empty until the loop's next write.
			var got string
			for deadline := time.Now().Add(5 * time.Second); got == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				got = inTaskQuiet(current(r.forks[0]), "cat /work/n")
			}
			if got == "" {
				t.Errorf("the fork of %s has no volume", h.ID)
			}
			if err := eng.Destroy(ctx, r.forks[0]); err != nil {
				t.Errorf("destroy the fork: %v", err)
			}
		case errors.Is(r.err, rollout.ErrUnknownHandle):
			refused++
		default:
			t.Errorf("fork of %s released meanwhile: %v, want it forked or refused as released", h.ID, r.err)
		}
	}
	t.Logf("forks racing their handle's release: %d forked, %d refused as released", forked, refused)

	// Checkpoints, rollbacks, forks and releases from four goroutines.
	var (
		mu         sync.Mutex
		handles    []string
		unexpected []string
		ops        = map[string]int{}
	)
	pick := func(r *rand.Rand) string {
		mu.Lock()
		defer mu.Unlock()
		if len(handles) == 0 {
			return ""
		}
		return handles[r.Intn(len(handles))]
	}
	note := func(op string, err error) {
		mu.Lock()
		defer mu.Unlock()
		ops[op]++
		if err != nil && !errors.Is(err, rollout.ErrUnknownHandle) {
			unexpected = append(unexpected, fmt.Sprintf("%s: %v", op, err))
		}
	}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(w)))
			for i := 0; i < 20; i++ {
				switch op := r.Intn(4); {
				case op == 0 || w == 0:
					h, err := eng.Checkpoint(ctx, sb)
					note("checkpoint", err)
					if err == nil {
						mu.Lock()
						handles = append(handles, h.ID)
						mu.Unlock()
					}
				case op == 1:
					if h := pick(r); h != "" {
						_, err := eng.Rollback(ctx, sb, h)
						note("rollback", err)
					}
				case op == 2:
					if h := pick(r); h != "" {
						forks, err := eng.Fork(ctx, h, 1)
						note("fork", err)
						for _, f := range forks {
							note("destroy", eng.Destroy(ctx, f))
						}
					}
				default:
					if h := pick(r); h != "" {
						note("release", eng.Release(ctx, h))
					}
				}
			}
		}(w)
	}
	wg.Wait()
	for _, u := range unexpected {
		t.Errorf("unexpected: %s", u)
	}
	t.Logf("operations: %v", ops)
	waitIn(t, current(sb), "test -s /work/n && test -s /tmp/n && echo ok", "ok")
}
