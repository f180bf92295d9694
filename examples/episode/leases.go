package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gvxrun/gvx"
)

// leaseEpisodes is the high-rate half of a rollout: short episodes, each
// a fresh copy of an image, from a lease pool — no containerd task and
// no process started on the host per episode; each release resets the
// sandbox in place for the next.
func leaseEpisodes(ctx context.Context, c *gvx.Client, image string) (retErr error) {
	const n = 20
	fmt.Printf("==> %d short episodes from a lease pool of 2 (each a fresh copy of the image)\n", n)
	t0 := time.Now()
	p, err := c.NewPool(ctx, gvx.PoolConfig{Name: "demoleases", Size: 2, Leases: true, Template: gvx.Config{Image: image}})
	if err != nil {
		return err
	}
	defer func() {
		if err := p.Close(ctx); err != nil && retErr == nil {
			retErr = err
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := p.WaitReady(wctx, 2); err != nil {
		return err
	}
	stepLine(t0, "pool booted")
	t0 = time.Now()
	seen := map[string]int{}
	for i := range n {
		l, err := p.Lease(ctx)
		if err != nil {
			return err
		}
		// An episode: look for what the last one left, then leave
		// something of its own.
		res, err := l.Exec(ctx, []string{"sh", "-c", fmt.Sprintf(`cat /work/left 2>/dev/null; mkdir -p /work && echo episode-%d > /work/left`, i)}, gvx.ExecOptions{})
		if rerr := l.Release(ctx); err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
		if res.ExitCode != 0 || len(res.Stdout) != 0 {
			return fmt.Errorf("episode %d found %q (exit %d): a lease must start from the image", i, strings.TrimSpace(string(res.Stdout)), res.ExitCode)
		}
		seen[l.ID()]++
	}
	el := time.Since(t0)
	stepLine(t0, "%d episodes (lease, command, release), %.1f a second", n, float64(n)/el.Seconds())
	fmt.Printf("    %d sandboxes served them, reset between episodes; none saw another's files\n", len(seen))
	return nil
}
