package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
)

// density starts n idle gvx sandboxes (sleep; conc at a time), lets them
// settle, checks that each answers an exec, and prints the memory of all
// gvx processes on the host divided by n — per kind of process (the shim,
// the Sentry, the gofer, the systrap stubs) — and the exec latencies. The
// binaries' shared pages are spread over all n, as on a full node.
func density(ctx context.Context, c *client.Client, img client.Image, gvxBin string, n, conc int) (err error) {
	rt := runtimeUnderTest{name: "gvx", runtime: api.RuntimeType}
	t0 := time.Now()
	all, first := startMany(ctx, c, img, rt, "dense", n, conc, func(i int) {
		fmt.Printf("density: %d of %d under way (%s)\n", i, n, time.Since(t0).Round(time.Second))
	})
	defer func() {
		fmt.Printf("density: stopping %d sandboxes\n", len(all))
		for _, m := range all {
			if serr := stopSandbox(ctx, m.cont, m.task); serr != nil && err == nil {
				err = serr
			}
		}
	}()
	if first != nil {
		return first
	}
	fmt.Printf("density: %d sandboxes started in %s; settling 5 s\n", n, time.Since(t0).Round(time.Second))
	time.Sleep(5 * time.Second) // gvx-sentry trims 2 s after its start

	var lat []time.Duration
	for i, m := range all {
		spec, err := m.cont.Spec(ctx)
		if err != nil {
			return err
		}
		pspec := *spec.Process
		pspec.Args = []string{"true"}
		t := time.Now()
		p, err := m.task.Exec(ctx, "d", &pspec, cio.NullIO)
		if err != nil {
			return fmt.Errorf("exec in sandbox %d: %w", i, err)
		}
		ch, err := p.Wait(ctx)
		if err != nil {
			return err
		}
		if err := p.Start(ctx); err != nil {
			return fmt.Errorf("exec in sandbox %d: %w", i, err)
		}
		if s := <-ch; s.ExitCode() != 0 {
			return fmt.Errorf("exec in sandbox %d exited %d", i, s.ExitCode())
		}
		lat = append(lat, time.Since(t))
		if _, err := p.Delete(ctx); err != nil {
			return err
		}
	}
	time.Sleep(3 * time.Second) // the execs' garbage trimmed (the runtime's own scavenger)

	type agg struct {
		procs    int
		uss, pss int64
	}
	by := map[string]*agg{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		exe, _ := os.Readlink(filepath.Join(d, "exe"))
		if filepath.Dir(exe) != gvxBin {
			continue
		}
		key := filepath.Base(exe)
		if key == api.SentryBinary {
			key = "gvx-sentry (stubs, monitors)"
			cmd, _ := os.ReadFile(filepath.Join(d, "cmdline"))
			for _, a := range strings.Split(string(cmd), "\x00")[1:] {
				if a == "boot" || a == "gofer" {
					key = "gvx-sentry " + a
				}
			}
		}
		var pid int
		fmt.Sscan(filepath.Base(d), &pid)
		uss, pss, ok := harness.Smaps(pid)
		if !ok {
			continue
		}
		if by[key] == nil {
			by[key] = &agg{}
		}
		by[key].procs++
		by[key].uss += uss
		by[key].pss += pss
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Printf("\ndensity: %d idle sandboxes (busybox sleep), memory of all gvx processes per sandbox:\n", n)
	var uss, pss int64
	for _, k := range keys {
		a := by[k]
		uss += a.uss
		pss += a.pss
		fmt.Printf("  %-30s %5d processes  USS %6.2f MiB  PSS %6.2f MiB\n", k, a.procs, mib(a.uss)/float64(n), mib(a.pss)/float64(n))
	}
	fmt.Printf("  %-30s %5s            USS %6.2f MiB  PSS %6.2f MiB\n", "total", "", mib(uss)/float64(n), mib(pss)/float64(n))
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fmt.Printf("exec `true` in each, one after another: p50 %s, p95 %s, max %s\n",
		ms(harness.Percentile(lat, 50)), ms(harness.Percentile(lat, 95)), ms(lat[len(lat)-1]))
	return nil
}
