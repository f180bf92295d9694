// Command churn benchmarks sustained sandbox churn: create→exec→destroy
// cycles, back to back from several workers, for a bounded time.
//
// It drives every runtime the same way through the containerd client:
// gvx adopting from a warm pool that follows demand and resets released
// sandboxes back into it (the default), an image pool of the bench's
// image (the task a process in the sandbox's root container), a lease
// pool through the SDK (Pool.Lease → Exec → Release: no containerd
// task, no host process started a cycle), E2B sandboxes of a lease
// template through `gvx serve` (create → process.Process/Start → kill
// over HTTP, as the e2b SDKs speak it), the same warm pool destroying
// each released sandbox and booting a new one (pool.reset = false), gvx with
// the pool refilling one sandbox at a time at a fixed size (the pool as it
// was), gvx without a pool, and runsc of the same gVisor version through
// containerd's runc shim. For each it prints the sustained rate, p50/p99
// create→exec, p50/p95 of the whole cycle (create→exec→delete), failed
// cycles, the adopt ratio, host CPU per cycle and where it goes (by kind
// of process, cpu.go), and what `gvx gc --dry-run` finds left behind
// afterwards.
// `make bench` runs it briefly (CHURNBENCHFLAGS).
//
//	go run ./bench/churn [-duration 20s] [-workers 8] [-pool 8]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"

	gvx "github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/janitor"
)

const ns = "gvxchurn"

type variant struct {
	name    string
	runtime string
	opts    any
	pooled  bool   // runs on a warm pool of its own, started when the variant runs
	poolCfg string // that pool's config lines beyond the size
	pool    *harness.Pool
	// lease: the cycle is the SDK's Pool.Lease → Exec → Release on a
	// lease pool (pool.lease), started when the variant runs.
	lease     bool
	leasePool *gvx.Pool
	// serve: the cycle is an E2B sandbox's create → command → kill
	// through `gvx serve` (HTTP, as the e2b SDKs speak it) on a lease
	// template of its own, started when the variant runs.
	serve   bool
	service *harness.Serve
}

type result struct {
	cycles, failed, adopted int
	toExec, whole           []time.Duration
	elapsed                 time.Duration
	cpu                     time.Duration // host CPU time over the run
	firstErr                error
	leftovers               int
	byCommand               map[string]windowUse // CPU and exits in the window by process name (cpu.go)
	breakdownErr            error
}

func main() {
	dur := flag.Duration("duration", 20*time.Second, "how long each runtime churns (at most 15m)")
	workers := flag.Int("workers", 8, "concurrent create→exec→destroy loops")
	poolSize := flag.Int("pool", 8, "pool.size of the warm pools (the default one grows with demand up to 4×)")
	onlyFlag := flag.String("only", "", "run only the variants whose names match this regular expression (e.g. 'reset|runsc')")
	flag.Parse()
	var only *regexp.Regexp
	if *onlyFlag != "" {
		var err error
		if only, err = regexp.Compile(*onlyFlag); err != nil {
			fmt.Fprintf(os.Stderr, "bench: -only: %v\n", err)
			os.Exit(2)
		}
	}
	if *dur <= 0 || *dur > 15*time.Minute {
		fmt.Fprintln(os.Stderr, "bench: -duration must be in (0, 15m]")
		os.Exit(2)
	}
	if err := run(*dur, *workers, *poolSize, only); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func run(dur time.Duration, workers, poolSize int, only *regexp.Regexp) error {
	ctx := namespaces.WithNamespace(context.Background(), ns)
	// Ctrl-C or SIGTERM stops the churn after the cycles in flight (they
	// finish on ctx) and returns through the clean-ups below: the private
	// containerd, its shims and sandboxes, the pool servers.
	interrupted, stop := harness.Interruptible(ctx, "bench")
	defer stop()
	b, err := harness.StartBench(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	bins, c, img := b.Bins, b.Client, b.Busybox
	pool := func(extra string) (*harness.Pool, func(), error) {
		dir, err := os.MkdirTemp("", "gvx-churn-")
		if err != nil {
			return nil, nil, err
		}
		p, err := harness.StartPoolWithConfig(ctx, bins.GVX, dir, poolSize, extra)
		if err != nil {
			os.RemoveAll(dir)
			return nil, nil, err
		}
		return p, func() {
			if err := p.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			}
			os.RemoveAll(dir)
		}, nil
	}
	vs := []variant{
		{name: "gvx (pool, demand, reset)", runtime: api.RuntimeType, pooled: true},
		{name: "gvx (image pool, reset)", runtime: api.RuntimeType, pooled: true,
			poolCfg: fmt.Sprintf("image = %q\ncontainerd = %q\nnamespace = %q\n", img.Name(), b.Containerd.Socket(), ns)},
		{name: "gvx (lease pool, SDK)", lease: true},
		{name: "gvx serve (lease, E2B HTTP)", serve: true},
		{name: "gvx (pool, demand, recreate)", runtime: api.RuntimeType, pooled: true, poolCfg: "reset = false\n"},
		{name: "gvx (pool, 1 boot at a time)", runtime: api.RuntimeType, pooled: true,
			poolCfg: fmt.Sprintf("max_size = %d\nboot_concurrency = 1\nreset = false\n", poolSize)},
		{name: "gvx (no pool)", runtime: api.RuntimeType},
		{name: "runsc (runc shim)", runtime: "io.containerd.runc.v2", opts: &options.Options{BinaryName: filepath.Join(bins.Runsc, "runsc")}},
	}
	var chosen []variant
	for _, v := range vs {
		if only == nil || only.MatchString(v.name) {
			chosen = append(chosen, v)
		}
	}
	if len(chosen) == 0 {
		return fmt.Errorf("-only %q matches no variant (they are: %s)", only, variantNames(vs))
	}
	for i, v := range chosen {
		if v.serve {
			srv, stopServe, err := leaseService(bins, b.Containerd.Socket(), filepath.Join(b.Images, "busybox.tar"), poolSize)
			if err != nil {
				return err
			}
			defer stopServe()
			chosen[i].service = srv
			continue
		}
		if v.lease {
			lp, closeSDK, err := leasePool(ctx, bins.GVX, b.Containerd.Socket(), img.Name(), poolSize)
			if err != nil {
				return err
			}
			defer closeSDK()
			chosen[i].leasePool = lp
			continue
		}
		if !v.pooled {
			continue
		}
		p, stopPool, err := pool(v.poolCfg)
		if err != nil {
			return err
		}
		defer stopPool()
		chosen[i].pool = p
		chosen[i].opts = &runtimeoptions.Options{ConfigPath: p.Config}
	}
	vs = chosen
	fmt.Printf("gvx churn bench: create→start→exec→delete for %s per runtime, %d workers, busybox, pools of %d, %d CPUs\n\n", dur, workers, poolSize, cpus())
	res := map[string]*result{}
	for _, v := range vs {
		if v.pool != nil {
			if err := v.pool.WaitReady(interrupted, poolSize, 2*time.Minute); err != nil {
				return err
			}
		}
		if v.service != nil {
			if err := v.service.PoolFull(interrupted, "lease"); err != nil {
				return v.service.Failed(err)
			}
		}
		if v.leasePool != nil {
			wctx, cancel := context.WithTimeout(interrupted, 2*time.Minute)
			err := v.leasePool.WaitReady(wctx, poolSize)
			cancel()
			if err != nil {
				return err
			}
		}
		r := churn(ctx, interrupted, c, img, v, dur, workers)
		if interrupted.Err() != nil {
			return fmt.Errorf("interrupted during %s after %d cycles (what the bench started is cleaned up)", v.name, r.cycles)
		}
		r.leftovers = leftovers(ctx, b.Containerd.Socket(), filepath.Join(b.Containerd.Dir, "state"))
		res[v.name] = r
	}
	fmt.Printf("%-30s %9s %8s %11s %11s %11s %11s %7s %8s %10s %9s\n", "runtime", "cycles/s", "cycles", "p50 →exec", "p99 →exec",
		"p50 cycle", "p95 cycle", "failed", "adopted", "CPU/cycle", "leftover")
	for _, v := range vs {
		r := res[v.name]
		fmt.Printf("%-30s %9.1f %8d %11s %11s %11s %11s %7d %8s %10s %9d\n", v.name, float64(r.cycles)/r.elapsed.Seconds(), r.cycles,
			ms(harness.Percentile(r.toExec, 50)), ms(harness.Percentile(r.toExec, 99)), ms(harness.Percentile(r.whole, 50)), ms(harness.Percentile(r.whole, 95)),
			r.failed, adoptRatio(v, r), ms(r.cpu/time.Duration(max(r.cycles, 1))), r.leftovers)
		if r.firstErr != nil {
			fmt.Printf("  first failure: %v\n", r.firstErr)
		}
	}
	fmt.Printf("\nwhere the CPU goes (all host processes in the window, by kind; CPU/cycle above counts the same window):\n")
	for _, v := range vs {
		r := res[v.name]
		if r.breakdownErr != nil {
			fmt.Printf("  %-30s %v\n", v.name, r.breakdownErr)
			continue
		}
		fmt.Printf("  %-30s %s\n", v.name, breakdown(r.byCommand, r.cycles))
	}
	printRatios(res)
	return nil
}

// printRatios prints the comparisons between the variants that ran.
func printRatios(res map[string]*result) {
	rate := func(r *result) float64 { return float64(r.cycles) / r.elapsed.Seconds() }
	p99 := func(r *result) float64 { return float64(harness.Percentile(r.toExec, 99)) }
	g, rc, s, ip, rs := res["gvx (pool, demand, reset)"], res["gvx (pool, demand, recreate)"], res["gvx (pool, 1 boot at a time)"],
		res["gvx (image pool, reset)"], res["runsc (runc shim)"]
	fmt.Println()
	if g != nil && rs != nil {
		fmt.Printf("ratios: sustained rate gvx (demand pool)/runsc %.2f×; p99 create→exec gvx/runsc %.2f×\n", rate(g)/rate(rs), p99(g)/p99(rs))
	}
	if g != nil && s != nil {
		fmt.Printf("demand/1-boot pool: sustained rate %.2f×\n", rate(g)/rate(s))
	}
	if ip != nil && rs != nil {
		fmt.Printf("image pool: sustained rate/runsc %.2f×, p99 create→exec/runsc %.2f×\n", rate(ip)/rate(rs), p99(ip)/p99(rs))
	}
	for _, name := range []string{"gvx (lease pool, SDK)", "gvx serve (lease, E2B HTTP)"} {
		if l := res[name]; l != nil && rs != nil {
			fmt.Printf("%s: sustained rate/runsc %.2f×, p99 create→exec/runsc %.2f×\n", name, rate(l)/rate(rs), p99(l)/p99(rs))
		}
	}
	if g != nil && rc != nil {
		fmt.Printf("reset vs recreate: sustained rate %.2f×, p50 cycle %.2f×, p95 cycle %.2f×, CPU/cycle %.2f×\n", rate(g)/rate(rc),
			ratio(harness.Percentile(g.whole, 50), harness.Percentile(rc.whole, 50)), ratio(harness.Percentile(g.whole, 95), harness.Percentile(rc.whole, 95)),
			ratio(g.cpu/time.Duration(max(g.cycles, 1)), rc.cpu/time.Duration(max(rc.cycles, 1))))
	}
}

// variantNames lists the variants' names for an error.
func variantNames(vs []variant) string {
	var names []string
	for _, v := range vs {
		names = append(names, fmt.Sprintf("%q", v.name))
	}
	return strings.Join(names, ", ")
}

// churn runs workers loops of create→exec→destroy until dur has passed
// or stop is done.
func churn(ctx, stop context.Context, c *client.Client, img client.Image, v variant, dur time.Duration, workers int) *result {
	r := &result{}
	var mu sync.Mutex
	var seq atomic.Int64
	win, werr := startCPUWindow()
	cpu0 := hostCPU()
	t0 := time.Now()
	deadline := t0.Add(dur)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && stop.Err() == nil {
				id := fmt.Sprintf("churn-%06d", seq.Add(1))
				d, whole, adopted, err := cycle(ctx, c, img, v, id)
				mu.Lock()
				if err != nil {
					r.failed++
					if r.firstErr == nil {
						r.firstErr = err
					}
				} else {
					r.cycles++
					r.toExec = append(r.toExec, d)
					r.whole = append(r.whole, whole)
					if adopted {
						r.adopted++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(t0)
	r.cpu = hostCPU() - cpu0
	if r.breakdownErr = werr; werr == nil {
		r.byCommand, r.breakdownErr = win.stop()
	}
	return r
}

// cycle creates and starts a sandbox, runs `true` in it, and deletes it;
// it returns create→exec (exec done), create→deleted and whether it
// adopted.
func cycle(ctx context.Context, c *client.Client, img client.Image, v variant, id string) (toExec, whole time.Duration, adopted bool, err error) {
	if v.leasePool != nil {
		return leaseCycle(ctx, v.leasePool)
	}
	if v.service != nil {
		toExec, whole, err := v.service.Cycle(ctx, "lease", "true")
		return toExec, whole, true, err
	}
	t0 := time.Now()
	cont, err := c.NewContainer(ctx, id, client.WithNewSnapshot(id, img),
		client.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs("sleep", "3600")), client.WithRuntime(v.runtime, v.opts))
	if err != nil {
		return 0, 0, false, fmt.Errorf("container: %w", err)
	}
	defer func() { _ = cont.Delete(context.WithoutCancel(ctx), client.WithSnapshotCleanup) }()
	task, err := cont.NewTask(ctx, cio.NullIO)
	if err != nil {
		return 0, 0, false, fmt.Errorf("task: %w", err)
	}
	deleted := false
	defer func() {
		if !deleted {
			_, _ = task.Delete(context.WithoutCancel(ctx), client.WithProcessKill)
		}
	}()
	if err := task.Start(ctx); err != nil {
		return 0, 0, false, fmt.Errorf("start: %w", err)
	}
	adopted = v.pool != nil && harness.Adopted(ns, id) != ""
	spec, err := cont.Spec(ctx)
	if err != nil {
		return 0, 0, adopted, err
	}
	ps := *spec.Process
	ps.Args = []string{"true"}
	p, err := task.Exec(ctx, "e", &ps, cio.NullIO)
	if err != nil {
		return 0, 0, adopted, fmt.Errorf("exec: %w", err)
	}
	ch, err := p.Wait(ctx)
	if err != nil {
		return 0, 0, adopted, err
	}
	if err := p.Start(ctx); err != nil {
		return 0, 0, adopted, fmt.Errorf("exec start: %w", err)
	}
	if st := <-ch; st.ExitCode() != 0 {
		return 0, 0, adopted, fmt.Errorf("exec exited %d", st.ExitCode())
	}
	toExec = time.Since(t0)
	_, _ = p.Delete(ctx)
	deleted = true
	if _, err := task.Delete(ctx, client.WithProcessKill); err != nil {
		return 0, 0, adopted, fmt.Errorf("delete: %w", err)
	}
	return toExec, time.Since(t0), adopted, nil
}

// leasePool starts a lease pool of size through the SDK (its own
// `gvx pool serve`) on the bench's containerd and image.
func leasePool(ctx context.Context, bin, socket, image string, size int) (*gvx.Pool, func(), error) {
	state, err := os.MkdirTemp("", "gvx-churn-sdk-")
	if err != nil {
		return nil, nil, err
	}
	c, err := gvx.Connect(ctx, gvx.Options{Containerd: socket, Namespace: ns, StateDir: state, BinDir: bin})
	if err != nil {
		os.RemoveAll(state)
		return nil, nil, err
	}
	p, err := c.NewPool(ctx, gvx.PoolConfig{Name: "churn", Size: size, Leases: true, Template: gvx.Config{Image: image}})
	if err != nil {
		c.Close(ctx)
		os.RemoveAll(state)
		return nil, nil, err
	}
	return p, func() {
		if err := p.Close(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		}
		c.Close(ctx)
		os.RemoveAll(state)
	}, nil
}

// leaseService starts gvx serve with one lease template, "lease", of
// image (an archive) with a pool of size.
func leaseService(bins harness.Bins, socket, image string, size int) (*harness.Serve, func(), error) {
	dir, err := os.MkdirTemp("", "gvx-churn-serve-")
	if err != nil {
		return nil, nil, err
	}
	tmpl := fmt.Sprintf("[[template]]\nname = \"lease\"\nimage = %q\npool_size = %d\nlease = true\nuser = \"root\"\nworkdir = \"/\"\n", image, size)
	s, err := harness.StartServe(dir, bins, socket, tmpl)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return s, func() {
		s.Stop()
		os.RemoveAll(dir)
	}, nil
}

// leaseCycle is a lease pool's create→exec→destroy: Lease, Exec `true`,
// Release (the sandbox's reset runs after it, in the pool's server).
func leaseCycle(ctx context.Context, p *gvx.Pool) (toExec, whole time.Duration, adopted bool, err error) {
	t0 := time.Now()
	l, err := p.Lease(ctx)
	if err != nil {
		return 0, 0, false, err
	}
	res, err := l.Exec(ctx, []string{"true"}, gvx.ExecOptions{})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("true exited %d: %s", res.ExitCode, res.Stderr)
	}
	toExec = time.Since(t0)
	if rerr := l.Release(ctx); err == nil {
		err = rerr
	}
	return toExec, time.Since(t0), true, err
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(max(b, 1)) }

// leftovers is what a dry-run sweep of the janitor finds once the
// runtime's churn is over, and the task bundle directories containerd
// (at state) still holds in the bench's namespace with no task left
// (shims exit asynchronously: it waits briefly). A stale bundle fails the
// next task of its id ("mkdir …: file exists").
func leftovers(ctx context.Context, socket, state string) int {
	var n int
	for range 20 {
		r := janitor.Sweep(ctx, janitor.Options{Layout: harness.State, Containerd: []string{socket}, DryRun: true})
		bundles, _ := os.ReadDir(filepath.Join(state, "io.containerd.runtime.v2.task", ns))
		if n = len(r.Items) + len(bundles); n == 0 {
			return 0
		}
		time.Sleep(500 * time.Millisecond)
	}
	return n
}

func adoptRatio(v variant, r *result) string {
	if v.pool == nil && v.leasePool == nil && v.service == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(r.adopted)/float64(max(r.cycles, 1)))
}

// hostCPU is the CPU time the host spent so far (all CPUs, not idle).
func hostCPU() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])
	var ticks int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is in user already
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

func cpus() int {
	data, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(data), "processor\t:")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
