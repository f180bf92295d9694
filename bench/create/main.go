// Command create benchmarks gvx's create→exec cycle against runsc and runc.
//
// It measures gvx against its peers in one run, through the containerd
// client: gvx (io.containerd.gvx.v2), runsc of the same gVisor version
// driven by containerd's runc shim (the usual production gVisor path) and
// runc. It prints p50/p95 latencies, ratios against the peers, create
// throughput and idle memory. `make bench` runs it.
//
//	go run ./bench/create [-runs 30] [-concurrency 8] [-burst 32] [-pool 32]
//	go run ./bench/create -density 1000 [-concurrency 8]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/volume"
)

type runtimeUnderTest struct {
	name    string
	runtime string
	opts    any
	volume  string // an ext4lite volume mounted at /data, if set
	// pool, if set, serves this runtime's sandboxes; before each timed
	// cycle the bench waits until it is full again (a pool sized for the
	// load), and counts the cycles that adopted a pool sandbox.
	pool    *harness.Pool
	adopted *int
}

func main() {
	runs := flag.Int("runs", 30, "cycles per runtime")
	conc := flag.Int("concurrency", 8, "parallel creates in the throughput test")
	burst := flag.Int("burst", 32, "sandboxes created in the throughput test")
	poolSize := flag.Int("pool", 32, "ready sandboxes of the warm pool (the throughput test adopts up to this many)")
	dense := flag.Int("density", 0, "instead: start this many idle gvx sandboxes and print their memory per sandbox")
	flag.Parse()
	if *dense > 0 {
		if err := runDensity(*dense, *conc); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*runs, *conc, *burst, *poolSize); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func runDensity(n, conc int) error {
	ctx, stop := harness.Interruptible(namespaces.WithNamespace(context.Background(), "gvxbench"), "bench")
	defer stop()
	b, err := harness.StartBench(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	return density(ctx, b.Client, b.Busybox, b.Bins.GVX, n, conc)
}

func run(runs, conc, burst, poolSize int) error {
	ctx, stop := harness.Interruptible(namespaces.WithNamespace(context.Background(), "gvxbench"), "bench")
	defer stop()
	b, err := harness.StartBench(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	bins, c, img := b.Bins, b.Client, b.Busybox

	volDir, err := os.MkdirTemp("/var/tmp", "gvx-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(volDir)
	if err := os.Chmod(volDir, 0o755); err != nil {
		return err
	}
	vol := filepath.Join(volDir, "data.ext4")
	if _, err := volume.Create(ctx, vol, volume.CreateOptions{Size: 1 << 30}); err != nil {
		return err
	}
	pl, err := harness.StartPool(ctx, bins.GVX, volDir, poolSize)
	if err != nil {
		return err
	}
	defer func() {
		if err := pl.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		}
	}()
	// An image pool: sandboxes booted on the bench's image, whose tasks
	// start as a process in the sandbox's root container.
	imgDir, err := os.MkdirTemp("", "gvx-bench-imgpool-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(imgDir)
	ip, err := harness.StartPoolWithConfig(ctx, bins.GVX, imgDir, poolSize,
		fmt.Sprintf("image = %q\ncontainerd = %q\nnamespace = %q\n", img.Name(), b.Containerd.Socket(), "gvxbench"))
	if err != nil {
		return err
	}
	defer func() {
		if err := ip.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		}
	}()
	adopted, adoptedImage := 0, 0
	rts := []runtimeUnderTest{
		{name: "gvx", runtime: api.RuntimeType},
		{name: "gvx (warm pool)", runtime: api.RuntimeType, opts: &runtimeoptions.Options{ConfigPath: pl.Config}, pool: pl, adopted: &adopted},
		{name: "gvx (image pool)", runtime: api.RuntimeType, opts: &runtimeoptions.Options{ConfigPath: ip.Config}, pool: ip, adopted: &adoptedImage},
		{name: "runsc (runc shim)", runtime: "io.containerd.runc.v2", opts: &options.Options{BinaryName: filepath.Join(bins.Runsc, "runsc")}},
		{name: "runc", runtime: "io.containerd.runc.v2"},
		{name: "gvx + ext4 volume", runtime: api.RuntimeType, volume: vol},
	}
	fmt.Printf("gvx bench: %d create→start→exec→delete cycles per runtime, busybox, containerd %s client, %d CPUs\n\n", runs, "v2.4.2", numCPU())
	results := map[string]cycleStats{}
	for _, rt := range rts {
		st, err := cycles(ctx, c, img, rt, runs)
		if err != nil {
			return fmt.Errorf("%s: %w", rt.name, err)
		}
		results[rt.name] = st
	}
	fmt.Printf("%-18s %12s %12s %12s %12s %12s %12s\n", "runtime", "create→exec", "p95", "full cycle", "p95", "delete", "p95")
	for _, rt := range rts {
		s := results[rt.name]
		fmt.Printf("%-18s %12s %12s %12s %12s %12s %12s\n", rt.name, ms(harness.Percentile(s.toExec, 50)), ms(harness.Percentile(s.toExec, 95)),
			ms(harness.Percentile(s.total, 50)), ms(harness.Percentile(s.total, 95)), ms(harness.Percentile(s.del, 50)), ms(harness.Percentile(s.del, 95)))
	}
	fmt.Printf("\ncreate→exec by phase (p50): container = snapshot + metadata; task create = shim start + sandbox create\n")
	fmt.Printf("%-18s %12s %12s %12s %12s\n", "runtime", "container", "task create", "task start", "exec")
	for _, rt := range rts {
		s := results[rt.name]
		fmt.Printf("%-18s %12s %12s %12s %12s\n", rt.name, ms(harness.Percentile(s.container, 50)), ms(harness.Percentile(s.create, 50)), ms(harness.Percentile(s.start, 50)), ms(harness.Percentile(s.exec, 50)))
	}
	fmt.Printf("\nmount-into-sandbox overhead of one 1 GiB ext4lite volume (p50): create→exec +%s, full cycle +%s\n",
		ms(harness.Percentile(results["gvx + ext4 volume"].toExec, 50)-harness.Percentile(results["gvx"].toExec, 50)),
		ms(harness.Percentile(results["gvx + ext4 volume"].total, 50)-harness.Percentile(results["gvx"].total, 50)))
	g, r, rc := results["gvx"], results["runsc (runc shim)"], results["runc"]
	fmt.Printf("\nratios (p50, lower is better): create→exec gvx/runsc %.2f×, gvx/runc %.2f×; full cycle gvx/runsc %.2f×, gvx/runc %.2f×\n",
		ratio(g.toExec, r.toExec), ratio(g.toExec, rc.toExec), ratio(g.total, r.total), ratio(g.total, rc.total))
	gp := results["gvx (warm pool)"]
	fmt.Printf("warm pool (%d sandboxes ready, %d of %d timed cycles adopted one): create→exec gvx/runsc %.2f×, gvx/runc %.2f×; full cycle gvx/runsc %.2f×\n",
		poolSize, adopted, runs, ratio(gp.toExec, r.toExec), ratio(gp.toExec, rc.toExec), ratio(gp.total, r.total))
	gi := results["gvx (image pool)"]
	fmt.Printf("image pool (%d sandboxes ready, %d of %d timed cycles adopted one): create→exec gvx/runsc %.2f×, gvx/runc %.2f×; full cycle gvx/runsc %.2f×\n",
		poolSize, adoptedImage, runs, ratio(gi.toExec, r.toExec), ratio(gi.toExec, rc.toExec), ratio(gi.total, r.total))

	fmt.Printf("\nthroughput: %d sandboxes created+started, %d at a time\n", burst, conc)
	for _, rt := range rts[:4] {
		if rt.pool != nil {
			if err := rt.pool.WaitReady(ctx, poolSize, time.Minute); err != nil {
				return err
			}
		}
		rate, err := throughput(ctx, c, img, rt, burst, conc)
		if err != nil {
			return fmt.Errorf("%s throughput: %w", rt.name, err)
		}
		fmt.Printf("  %-18s %6.1f creates/s\n", rt.name, rate)
	}

	fmt.Printf("\nidle memory of one sandbox (sleep), host processes below and including the shim:\n")
	for _, rt := range rts[:4] {
		if rt.pool != nil {
			if err := rt.pool.WaitReady(ctx, poolSize, time.Minute); err != nil {
				return err
			}
		}
		uss, pss, n, err := idleMemory(ctx, c, img, rt)
		if err != nil {
			return fmt.Errorf("%s memory: %w", rt.name, err)
		}
		fmt.Printf("  %-18s USS %6.1f MiB  PSS %6.1f MiB  (%d processes)\n", rt.name, mib(uss), mib(pss), n)
	}
	return nil
}

type cycleStats struct {
	toExec, total, del []time.Duration
	// phases of create→exec: container (snapshot+metadata), task create
	// (shim start + sandbox create), task start, exec.
	container, create, start, exec []time.Duration
}

func cycles(ctx context.Context, c *client.Client, img client.Image, rt runtimeUnderTest, n int) (cycleStats, error) {
	var st cycleStats
	// One warm-up cycle (page cache, first shim start) is not counted.
	for i := -1; i < n; i++ {
		id := fmt.Sprintf("bench-%03d", i+1)
		if rt.pool != nil {
			if err := rt.pool.WaitReady(ctx, rt.pool.Size(), time.Minute); err != nil {
				return st, err
			}
		}
		t0 := time.Now()
		cont, task, ph, err := startSandboxPhases(ctx, c, img, rt, id)
		if err != nil {
			return st, err
		}
		if rt.adopted != nil && i >= 0 && harness.Adopted("gvxbench", id) != "" {
			*rt.adopted++
		}
		spec, err := cont.Spec(ctx)
		if err != nil {
			return st, err
		}
		pspec := *spec.Process
		pspec.Args = []string{"true"}
		p, err := task.Exec(ctx, "e", &pspec, cio.NullIO)
		if err != nil {
			return st, fmt.Errorf("exec: %w", err)
		}
		ch, err := p.Wait(ctx)
		if err != nil {
			return st, err
		}
		if err := p.Start(ctx); err != nil {
			return st, fmt.Errorf("exec start: %w", err)
		}
		if s := <-ch; s.ExitCode() != 0 {
			return st, fmt.Errorf("exec exited %d", s.ExitCode())
		}
		t1 := time.Now()
		if _, err := p.Delete(ctx); err != nil {
			return st, err
		}
		if err := stopSandbox(ctx, cont, task); err != nil {
			return st, err
		}
		t2 := time.Now()
		if i >= 0 {
			st.container = append(st.container, ph[0])
			st.create = append(st.create, ph[1])
			st.start = append(st.start, ph[2])
			st.exec = append(st.exec, t1.Sub(t0)-ph[0]-ph[1]-ph[2])
			st.toExec = append(st.toExec, t1.Sub(t0))
			st.total = append(st.total, t2.Sub(t0))
			st.del = append(st.del, t2.Sub(t1))
		}
	}
	return st, nil
}

func startSandbox(ctx context.Context, c *client.Client, img client.Image, rt runtimeUnderTest, id string) (client.Container, client.Task, error) {
	cont, task, _, err := startSandboxPhases(ctx, c, img, rt, id)
	return cont, task, err
}

// startSandboxPhases creates and starts a sandbox and returns how long the
// container, the task's creation and its start took.
func startSandboxPhases(ctx context.Context, c *client.Client, img client.Image, rt runtimeUnderTest, id string) (client.Container, client.Task, [3]time.Duration, error) {
	var ph [3]time.Duration
	t := time.Now()
	cont, err := c.NewContainer(ctx, id,
		client.WithNewSnapshot(id, img),
		client.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs("sleep", "3600"), withVolume(rt.volume)),
		client.WithRuntime(rt.runtime, rt.opts))
	if err != nil {
		return nil, nil, ph, fmt.Errorf("container: %w", err)
	}
	ph[0] = time.Since(t)
	t = time.Now()
	task, err := cont.NewTask(ctx, cio.NullIO)
	if err != nil {
		_ = cont.Delete(ctx, client.WithSnapshotCleanup)
		return nil, nil, ph, fmt.Errorf("task: %w", err)
	}
	ph[1] = time.Since(t)
	t = time.Now()
	if err := task.Start(ctx); err != nil {
		_, _ = task.Delete(ctx, client.WithProcessKill)
		_ = cont.Delete(ctx, client.WithSnapshotCleanup)
		return nil, nil, ph, fmt.Errorf("start: %w", err)
	}
	ph[2] = time.Since(t)
	return cont, task, ph, nil
}

func stopSandbox(ctx context.Context, cont client.Container, task client.Task) error {
	if _, err := task.Delete(ctx, client.WithProcessKill); err != nil {
		return fmt.Errorf("delete task: %w", err)
	}
	return cont.Delete(ctx, client.WithSnapshotCleanup)
}

// withVolume mounts an ext4lite volume at /data.
func withVolume(path string) oci.SpecOpts {
	return func(ctx context.Context, c oci.Client, cont *containers.Container, s *oci.Spec) error {
		if path == "" {
			return nil
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/data", Type: "ext4", Source: path, Options: []string{"rw"}})
		return nil
	}
}

func ratio(a, b []time.Duration) float64 {
	return float64(harness.Percentile(a, 50)) / float64(harness.Percentile(b, 50))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func numCPU() int { return goruntime.NumCPU() }
