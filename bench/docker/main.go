// Command docker benchmarks episode reset for Docker-in-gvx.
//
// It measures an episode reset from a golden /var/lib/docker volume to the
// first inner `docker run` done, split into clone, sandbox up, dockerd
// ready and first run; sequentially and with several episodes at once; for
// a reflink clone (XFS), a copy on a filesystem without reflink (ext4), a
// reflink clone whose sandbox comes from a warm docker pool, and a cold
// start on an empty volume plus `docker load`; and episodes restored from a
// golden checkpoint of booted dockerd (`gvx golden build --checkpoint`),
// restored on demand and from a hot spare. `make bench` runs it.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/dind"
	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/volume"
)

const (
	dindImage = "gvx.test/dind:latest"
	busybox   = "gvx.test/busybox:latest"
)

func main() {
	runs := flag.Int("runs", 20, "sequential episodes per flow")
	conc := flag.Int("concurrency", 8, "episodes started at once (0: none)")
	only := flag.String("flows", "", "run only the flows whose names contain one of these comma-separated words")
	flag.Parse()
	if err := run(*runs, *conc, *only); err != nil {
		fmt.Fprintf(os.Stderr, "dockerbench: %v\n", err)
		os.Exit(1)
	}
}

// sample is one episode reset, each phase measured from the start: the
// first run is made through the host socket (Engine API, as a harness
// does); cliRun is a second one made by the docker CLI inside the sandbox
// (as an agent does), measured on its own.
type sample struct{ clone, up, ready, firstRun, cliRun time.Duration }

type flow struct {
	name string
	dir  string // where golden and episode volumes live
	cold bool   // empty volume + docker load instead of a clone
	// pool, if set, is a docker pool the episodes' sandboxes come from
	// (waited for to be full before each sequential episode), and runner
	// the runner whose sandboxes adopt its sandboxes.
	pool   *harness.Pool
	runner *dind.Runner
	// checkpoint, if set, is a golden checkpoint (in runner's client's
	// store) the episodes are restored from; spare: from a hot spare
	// (rollout Fork) rather than a restore under the episode's id.
	checkpoint string
	spare      bool
}

func (f flow) wanted(only string) bool {
	if only == "" {
		return true
	}
	for _, w := range strings.Split(only, ",") {
		if w != "" && strings.Contains(f.name, w) {
			return true
		}
	}
	return false
}

func run(runs, conc int, only string) error {
	bins := harness.BinsFromEnv()
	images := os.Getenv("IMAGES")
	if bins.GVX == "" || bins.Containerd == "" || images == "" {
		return fmt.Errorf("run through `make bench` (needs GVX_BIN, CONTAINERD_BIN, IMAGES)")
	}
	ctx, stop := harness.Interruptible(namespaces.WithNamespace(context.Background(), "gvxbench"), "bench")
	defer stop()
	ctrd, err := harness.Start(ctx, bins)
	if err != nil {
		return err
	}
	defer ctrd.Close()
	c, err := client.New(ctrd.Socket())
	if err != nil {
		return err
	}
	defer c.Close()
	progress("importing the dind image")
	if _, err := harness.ImportArchive(ctx, c, filepath.Join(images, "dind.tar"), ""); err != nil {
		return err
	}
	work, err := os.MkdirTemp("/var/tmp", "gvx-dockerbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o755); err != nil {
		return err
	}
	xfs, cleanup, err := harness.LoopFS(work, "xfs")
	if err != nil {
		return err
	}
	defer cleanup()
	ext4, cleanup2, err := harness.LoopFS(work, "ext4")
	if err != nil {
		return err
	}
	defer cleanup2()

	sdk, err := gvx.Connect(ctx, gvx.Options{Containerd: ctrd.Socket(), Namespace: "gvxbench"})
	if err != nil {
		return err
	}
	defer sdk.Close(ctx)
	r := &dind.Runner{Client: sdk}
	bb := filepath.Join(images, "busybox.tar")
	progress(fmt.Sprintf("starting a docker pool of %d sandboxes", conc))
	pl, err := harness.StartPoolWithConfig(ctx, bins.GVX, work, max(conc, 1), "[docker]\nenabled = true\n")
	if err != nil {
		return err
	}
	defer func() {
		if err := pl.Stop(); err != nil {
			progress(err.Error())
		}
	}()
	// Episodes whose runtime config is the pool's adopt its sandboxes.
	pooledSDK, err := gvx.Connect(ctx, gvx.Options{Containerd: ctrd.Socket(), Namespace: "gvxbench", RuntimeConfig: pl.Config})
	if err != nil {
		return err
	}
	defer pooledSDK.Close(ctx)
	for _, dir := range []string{xfs, ext4} {
		progress("building a golden volume in " + dir)
		if _, err := r.BuildGolden(ctx, dind.GoldenOptions{Out: filepath.Join(dir, "golden.ext4"), Size: 4 << 30, Image: dindImage, Load: []string{bb}}); err != nil {
			return err
		}
	}
	// The golden checkpoint: dockerd booted on the XFS golden volume,
	// warmed with one run, checkpointed (what `gvx golden build
	// --checkpoint` does), in a store beside it.
	gold := filepath.Join(xfs, "golden.ext4")
	ckSDK, err := gvx.Connect(ctx, gvx.Options{Containerd: ctrd.Socket(), Namespace: "gvxbench", CheckpointDir: dind.GoldenCheckpointDir(gold)})
	if err != nil {
		return err
	}
	defer ckSDK.Close(ctx)
	spareSDK, err := gvx.Connect(ctx, gvx.Options{Containerd: ctrd.Socket(), Namespace: "gvxbench", CheckpointDir: dind.GoldenCheckpointDir(gold), Spares: 1})
	if err != nil {
		return err
	}
	defer spareSDK.Close(ctx)
	progress("checkpointing dockerd booted on the XFS golden volume")
	ckRunner := &dind.Runner{Client: ckSDK}
	ck, err := ckRunner.CheckpointGolden(ctx, gold, dindImage, []string{busybox})
	if err != nil {
		return err
	}
	defer func() { _ = ckSDK.ReleaseCheckpoint(ctx, ck) }()
	flows := []flow{
		{name: "reflink clone (XFS)", dir: xfs},
		{name: "sparse copy (ext4, no reflink)", dir: ext4},
		{name: "reflink clone + warm docker pool", dir: xfs, pool: pl, runner: &dind.Runner{Client: pooledSDK}},
		{name: "cold: empty volume + docker load", dir: xfs, cold: true},
		{name: "golden checkpoint: restore", dir: xfs, runner: ckRunner, checkpoint: ck},
		{name: "golden checkpoint: hot spare", dir: xfs, runner: &dind.Runner{Client: spareSDK}, checkpoint: ck, spare: true},
	}
	var picked []flow
	for _, f := range flows {
		if f.wanted(only) {
			picked = append(picked, f)
		}
	}
	flows = picked
	fmt.Printf("episode reset: golden 4 GiB volume with busybox preloaded; dind = Debian docker.io 20.10 in gVisor; %d sequential runs, then %d at once\n\n", runs, conc)
	fmt.Printf("%-34s %-10s %10s %10s %10s %12s %12s %12s\n", "flow", "mode", "clone", "sandbox up", "dockerd", "first run", "p95 first run", "CLI run")
	var base time.Duration
	for _, f := range flows {
		seq := make([]sample, 0, runs)
		for i := 0; i < runs; i++ {
			if f.pool != nil {
				if err := f.pool.WaitReady(ctx, conc, time.Minute); err != nil {
					return err
				}
			}
			s, err := episode(ctx, r, f, fmt.Sprintf("ep-%d", i), bb)
			if err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
			seq = append(seq, s)
		}
		p := summarize(seq)
		fmt.Printf("%-34s %-10s %10s %10s %10s %12s %12s %12s\n", f.name, "sequential", ms(p.clone), ms(p.up), ms(p.ready), ms(p.firstRun), ms(harness.Percentile(firstRuns(seq), 95)), ms(p.cliRun))
		if base == 0 {
			base = p.firstRun
		}
		if conc == 0 {
			continue
		}
		if f.pool != nil {
			if err := f.pool.WaitReady(ctx, conc, time.Minute); err != nil {
				return err
			}
		}
		par, wall, err := concurrent(ctx, r, f, conc, bb)
		if err != nil {
			return fmt.Errorf("%s concurrent: %w", f.name, err)
		}
		q := summarize(par)
		fmt.Printf("%-34s %-10s %10s %10s %10s %12s %12s %12s   (all %d done in %s)\n", "", fmt.Sprintf("%d at once", conc), ms(q.clone), ms(q.up), ms(q.ready), ms(q.firstRun), ms(harness.Percentile(firstRuns(par), 95)), ms(q.cliRun), conc, ms(wall))
		if f.name != flows[0].name {
			fmt.Printf("%-34s ratio of first-run p50 to the reflink flow: %.2f×\n", "", float64(p.firstRun)/float64(base))
		}
	}
	fmt.Printf("\n(phases are cumulative from the start of the reset, p50 unless noted; for the golden checkpoint flows \"sandbox up\" is the restore (a spare's: two control calls) and \"dockerd\" its first answer on the host socket; \"first run\" = the first `docker run --rm busybox true` done, through the host socket (Engine API create/start/wait/remove, as a harness drives an episode); \"CLI run\" = the next one by the docker CLI inside the sandbox, on its own)\n")
	return nil
}

// episode resets one episode and measures it, then tears it down.
func episode(ctx context.Context, r *dind.Runner, f flow, id, bb string) (sample, error) {
	if f.runner != nil {
		r = f.runner
	}
	vol := filepath.Join(f.dir, id+".ext4")
	var s sample
	var ep *dind.Episode
	t0 := time.Now()
	if f.checkpoint != "" {
		eid := id
		if f.spare {
			eid = ""
		}
		var err error
		if ep, err = r.RestoreEpisode(ctx, eid, f.checkpoint); err != nil {
			return s, err
		}
		s.up, s.ready = ep.Up, ep.Ready
	} else if f.cold {
		if _, err := volume.Create(ctx, vol, volume.CreateOptions{Size: 4 << 30}); err != nil {
			return s, err
		}
		s.clone = time.Since(t0)
		sb, err := r.Start(ctx, id, dindImage, vol)
		if err != nil {
			os.Remove(vol)
			return s, err
		}
		ep = &dind.Episode{Sandbox: sb}
		s.up, s.ready = s.clone+sb.Up, s.clone+sb.Ready
		f, err := os.Open(bb)
		if err != nil {
			return s, err
		}
		_, err = sb.Docker.Load(ctx, f)
		f.Close()
		if err != nil {
			return s, err
		}
	} else {
		var err error
		if ep, err = r.StartEpisode(ctx, id, dindImage, filepath.Join(f.dir, "golden.ext4"), vol); err != nil {
			return s, err
		}
		s.clone, s.up, s.ready = ep.Clone, ep.Up, ep.Ready
		if f.pool != nil && harness.Adopted("gvxbench", id) == "" {
			_ = ep.Close(ctx, false)
			return s, fmt.Errorf("episode %s did not adopt a pool sandbox; pool log:\n%s", id, f.pool.Log())
		}
	}
	var steps []string
	ep.Docker.Trace = func(method, path string, took time.Duration, err error) {
		steps = append(steps, fmt.Sprintf("%s %s %s (%v)", method, path, ms(took), err))
	}
	t1 := time.Now()
	// A first run still going after stallAfter has its dockerd's and inner
	// containerd's goroutines dumped (SIGUSR1) and printed: what they wait on.
	stall := time.AfterFunc(stallAfter, func() { dumpStacks(ctx, ep, id) })
	code, err := ep.Docker.Run(ctx, busybox, "true")
	stall.Stop()
	s.firstRun = time.Since(t0)
	if took := time.Since(t1); took > 5*time.Second {
		fmt.Fprintf(os.Stderr, "dockerbench: %s: a slow first run, %s after dockerd answered: %s\n", id, ms(took), strings.Join(steps, "; "))
	}
	if err == nil && code != 0 {
		err = fmt.Errorf("first docker run exited %d", code)
	}
	if err == nil {
		var out, errb bytes.Buffer
		t1 = time.Now()
		code, err = ep.Exec(ctx, &out, &errb, "docker", "run", "--rm", "--pull", "never", busybox, "true")
		s.cliRun = time.Since(t1)
		if err == nil && code != 0 {
			err = fmt.Errorf("docker CLI run exited %d: %s", code, errb.String())
		}
	}
	if cerr := ep.Close(ctx, false); cerr != nil && err == nil {
		err = cerr
	}
	return s, err
}

// stallAfter is how long a first run may take before dumpStacks runs.
const stallAfter = 5 * time.Second

// dumpStacks has dockerd and the containerd it started write their
// goroutine stacks (both do on SIGUSR1: dockerd to /var/run/docker,
// containerd to /tmp) and prints them, to show where a stalled Engine API
// call waits.
func dumpStacks(ctx context.Context, ep *dind.Episode, id string) {
	const script = `for p in dockerd containerd; do kill -USR1 $(pidof $p) || echo "no $p"; done; sleep 2
for f in /var/run/docker/goroutine-stacks-*.log /tmp/containerd.*.stacks.log; do echo "=== $f"; cat "$f"; done`
	var out, errb bytes.Buffer
	code, err := ep.Exec(ctx, &out, &errb, "sh", "-c", script)
	f, ferr := os.CreateTemp("", "dockerbench-stall-"+id+"-*.log")
	if ferr != nil {
		fmt.Fprintf(os.Stderr, "dockerbench: %s: stall dump: %v\n", id, ferr)
		return
	}
	fmt.Fprintf(f, "exit %d, err %v\n%s\n--- stderr\n%s", code, err, out.String(), errb.String())
	f.Close()
	fmt.Fprintf(os.Stderr, "dockerbench: %s: first run still going after %v: dockerd's and containerd's stacks in %s\n", id, stallAfter, f.Name())
}

func concurrent(ctx context.Context, r *dind.Runner, f flow, n int, bb string) ([]sample, time.Duration, error) {
	out := make([]sample, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out[i], errs[i] = episode(ctx, r, f, fmt.Sprintf("par-%d", i), bb)
		}(i)
	}
	wg.Wait()
	wall := time.Since(t0)
	for _, err := range errs {
		if err != nil {
			return nil, 0, err
		}
	}
	return out, wall, nil
}

func summarize(s []sample) sample {
	col := func(f func(sample) time.Duration) time.Duration {
		d := make([]time.Duration, len(s))
		for i, x := range s {
			d[i] = f(x)
		}
		return harness.Percentile(d, 50)
	}
	return sample{
		clone:    col(func(x sample) time.Duration { return x.clone }),
		up:       col(func(x sample) time.Duration { return x.up }),
		ready:    col(func(x sample) time.Duration { return x.ready }),
		firstRun: col(func(x sample) time.Duration { return x.firstRun }),
		cliRun:   col(func(x sample) time.Duration { return x.cliRun }),
	}
}

func firstRuns(s []sample) []time.Duration {
	d := make([]time.Duration, len(s))
	for i, x := range s {
		d[i] = x.firstRun
	}
	return d
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }

func progress(s string) { fmt.Fprintf(os.Stderr, "dockerbench: %s\n", s) }
