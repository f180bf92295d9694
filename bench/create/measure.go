package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"

	"github.com/gvxrun/gvx/integration/harness"
)

// started is one sandbox startMany started.
type started struct {
	cont client.Container
	task client.Task
}

// startMany starts n sandboxes of rt, ids prefix-NNNN, conc at a time. It
// returns those it started (the caller stops them) and the first error;
// every is called after each 100 starts are under way.
func startMany(ctx context.Context, c *client.Client, img client.Image, rt runtimeUnderTest, prefix string, n, conc int, every func(i int)) ([]started, error) {
	var (
		mu    sync.Mutex
		all   []started
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, conc)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			cont, task, err := startSandbox(ctx, c, img, rt, fmt.Sprintf("%s-%04d", prefix, i))
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			if err == nil {
				all = append(all, started{cont, task})
			}
		}(i)
		if every != nil && (i+1)%100 == 0 {
			every(i + 1)
		}
	}
	wg.Wait()
	return all, first
}

func throughput(ctx context.Context, c *client.Client, img client.Image, rt runtimeUnderTest, n, conc int) (float64, error) {
	t0 := time.Now()
	all, first := startMany(ctx, c, img, rt, "burst", n, conc, nil)
	elapsed := time.Since(t0)
	for _, m := range all {
		if err := stopSandbox(ctx, m.cont, m.task); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return 0, first
	}
	return float64(n) / elapsed.Seconds(), nil
}

func idleMemory(ctx context.Context, c *client.Client, img client.Image, rt runtimeUnderTest) (uss, pss int64, n int, err error) {
	cont, task, err := startSandbox(ctx, c, img, rt, "idle")
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() {
		if derr := stopSandbox(ctx, cont, task); derr != nil && err == nil {
			err = derr
		}
	}()
	time.Sleep(3 * time.Second) // let start-up settle (gvx-sentry trims 2 s after its start)
	shim := harness.ParentOf(int(task.Pid()))
	pids := append([]int{shim}, harness.Descendants(shim)...)
	if sb := harness.Adopted("gvxbench", "idle"); sb != "" {
		// An adopted sandbox's processes are not below the shim.
		sentry, err := harness.SandboxPid(sb)
		if err != nil {
			return 0, 0, 0, err
		}
		pids = append(append(pids, sentry), harness.Descendants(sentry)...)
	}
	for _, pid := range pids {
		u, p, ok := harness.Smaps(pid)
		if ok {
			uss += u
			pss += p
			n++
		}
	}
	return uss, pss, n, nil
}
