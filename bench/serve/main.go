// Command serve benchmarks gvx serve against gvx's Go SDK.
//
// On a private containerd it measures, p50/p95 over -runs cycles, create +
// first command + kill of an E2B sandbox two ways: through `gvx serve`
// with the official e2b JS SDK (Sandbox.create, commands.run('true'),
// kill), and through the Go SDK directly (New, Exec of the same
// `/bin/bash -l -c true` as user, Close) — each from a template without a
// pool and from one with a ready pool (the bench waits until the pool is
// full before each cycle). Through the service the pooled template is
// measured twice: as configured by default (one hot sandbox, acquired
// from the pool ahead of the create) and with hot = 0 (each create
// acquires from the pool), and a third time as a checkpointable template
// (a plain pool: the sandbox's container created at acquire, one hot),
// and a fourth as a lease template (lease = true: a create leases a
// sandbox of the pool, no containerd task; the Go SDK's Pool.Lease beside
// it). The service's overhead is the difference. Then
// -concurrent commands.run at once through the service. `make bench` runs
// it; -plain=false leaves out the template without a pool.
//
//	go run ./bench/serve [-runs 30] [-rounds 3] [-pool 2] [-concurrent 100] [-plain=true]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/integration/harness"
)

func main() {
	runs := flag.Int("runs", 30, "timed cycles per path")
	pool := flag.Int("pool", 2, "ready sandboxes of the pooled template")
	conc := flag.Int("concurrent", 100, "commands.run at once through the service")
	rounds := flag.Int("rounds", 3, "turns the paths take (runs are split among them)")
	plain := flag.Bool("plain", true, "measure the template without a pool too")
	flag.Parse()
	if err := run(*runs, *rounds, *pool, *conc, *plain); err != nil {
		fmt.Fprintf(os.Stderr, "bench/serve: %v\n", err)
		os.Exit(1)
	}
}

func (r *sdkResult) add(o sdkResult) {
	r.CreateRun = append(r.CreateRun, o.CreateRun...)
	r.Cycle = append(r.Cycle, o.Cycle...)
}

type sdkResult struct {
	CreateRun  []float64 `json:"createRun"`
	Cycle      []float64 `json:"cycle"`
	Concurrent *struct {
		Commands, Sandboxes, Errors int
		MS                          float64 `json:"ms"`
		FirstError                  *string `json:"firstError"`
	} `json:"concurrent"`
}

func run(runs, rounds, poolSize, conc int, plain bool) (retErr error) {
	ctx, stop := harness.Interruptible(context.Background(), "bench")
	defer stop()
	bins := harness.BinsFromEnv()
	images := os.Getenv("IMAGES")
	if bins.GVX == "" || bins.Containerd == "" || images == "" {
		return fmt.Errorf("run through `make bench` (needs GVX_BIN, CONTAINERD_BIN, IMAGES)")
	}
	image := filepath.Join(images, "e2b-base.tar")
	ctrd, err := harness.Start(ctx, bins)
	if err != nil {
		return err
	}
	defer ctrd.Close()
	dir, err := os.MkdirTemp("/run", "gvxbench-serve-")
	if err != nil {
		return err
	}
	defer func() {
		if retErr == nil {
			_ = os.RemoveAll(dir)
		}
	}()

	mods, err := harness.NPMModules("integration/e2b", "e2b", os.Stdout)
	if err != nil {
		return err
	}
	srv, err := startServe(dir, bins, ctrd.Socket(), image, poolSize)
	if err != nil {
		return err
	}
	defer srv.Stop()
	// The paths take turns, rounds times, so that a drift of the
	// machine's load does not favour one.
	var goPlain, goPool, goLease, rawPlain, rawPool, rawCold, rawCk, rawLease, jsPlain, jsPool, jsCold, jsCk, jsLease sdkResult
	per := (runs + rounds - 1) / rounds
	plainRuns := per
	if !plain {
		plainRuns = 0
	}
	for r := 0; r < rounds; r++ {
		fmt.Printf("bench/serve: round %d of %d: the Go SDK, HTTP to gvx serve, the e2b JS SDK to gvx serve (%d cycles each, without a pool, with one (hot = 0), with one (one hot))\n", r+1, rounds, per)
		gp, gq, gl, err := goSDK(ctx, ctrd.Socket(), filepath.Join(dir, "sdk"), bins.GVX, image, plainRuns, per, poolSize)
		if err != nil {
			return fmt.Errorf("go SDK: %w", err)
		}
		goPlain.add(gp)
		goPool.add(gq)
		goLease.add(gl)
		for _, p := range []struct {
			tmpl string
			runs int
			raw  *sdkResult
			js   *sdkResult
		}{{"base", plainRuns, &rawPlain, &jsPlain}, {"cold", per, &rawCold, &jsCold}, {"pooled", per, &rawPool, &jsPool}, {"ckpooled", per, &rawCk, &jsCk}, {"leased", per, &rawLease, &jsLease}} {
			if p.runs == 0 {
				continue
			}
			rr, err := srv.raw(ctx, p.tmpl, p.runs)
			if err != nil {
				return srv.Failed(err)
			}
			c := 0
			if r == rounds-1 && p.tmpl == "pooled" {
				c = conc
			}
			jr, err := srv.node(mods, p.tmpl, p.runs, c)
			if err != nil {
				return srv.Failed(err)
			}
			p.raw.add(rr)
			p.js.add(jr)
			if jr.Concurrent != nil {
				p.js.Concurrent = jr.Concurrent
			}
		}
	}

	fmt.Printf("\ncreate + first command (p50 / p95 ms, %d cycles each; the cycle adds kill)\n\n", len(goPool.CreateRun))
	fmt.Println("| path | template | create + first command p50 | p95 | full cycle p50 | p95 |")
	fmt.Println("|---|---|---|---|---|---|")
	row := func(path, tmpl string, cr, cy []float64) {
		fmt.Printf("| %s | %s | %.1f | %.1f | %.1f | %.1f |\n", path, tmpl, pct(cr, 50), pct(cr, 95), pct(cy, 50), pct(cy, 95))
	}
	pooled := fmt.Sprintf("pool of %d", poolSize)
	cold := pooled + ", hot = 0"
	hot := pooled + " (default: 1 hot)"
	if plain {
		row("Go SDK", "no pool", goPlain.CreateRun, goPlain.Cycle)
		row("HTTP (Go) → gvx serve", "no pool", rawPlain.CreateRun, rawPlain.Cycle)
		row("e2b JS SDK → gvx serve", "no pool", jsPlain.CreateRun, jsPlain.Cycle)
	}
	row("Go SDK", pooled+" (Acquire)", goPool.CreateRun, goPool.Cycle)
	row("HTTP (Go) → gvx serve", cold, rawCold.CreateRun, rawCold.Cycle)
	row("e2b JS SDK → gvx serve", cold, jsCold.CreateRun, jsCold.Cycle)
	row("HTTP (Go) → gvx serve", hot, rawPool.CreateRun, rawPool.Cycle)
	row("e2b JS SDK → gvx serve", hot, jsPool.CreateRun, jsPool.Cycle)
	ck := pooled + ", checkpointable (a plain pool; 1 hot)"
	row("HTTP (Go) → gvx serve", ck, rawCk.CreateRun, rawCk.Cycle)
	row("e2b JS SDK → gvx serve", ck, jsCk.CreateRun, jsCk.Cycle)
	leased := pooled + ", lease = true"
	row("Go SDK", pooled+" (Lease)", goLease.CreateRun, goLease.Cycle)
	row("HTTP (Go) → gvx serve", leased, rawLease.CreateRun, rawLease.Cycle)
	row("e2b JS SDK → gvx serve", leased, jsLease.CreateRun, jsLease.Cycle)
	diff := func(what string, a, b sdkResult) {
		fmt.Printf("%s, p50 difference: create + first command %.1f ms, full cycle %.1f ms\n", what,
			pct(a.CreateRun, 50)-pct(b.CreateRun, 50), pct(a.Cycle, 50)-pct(b.Cycle, 50))
	}
	fmt.Println()
	if plain {
		diff("service overhead (HTTP → gvx serve − Go SDK), no pool", rawPlain, goPlain)
		diff("service + JS SDK overhead (e2b JS SDK → gvx serve − Go SDK), no pool", jsPlain, goPlain)
	}
	diff("service overhead (HTTP → gvx serve − Go SDK), pooled, hot = 0", rawCold, goPool)
	diff("service + JS SDK overhead (e2b JS SDK → gvx serve − Go SDK), pooled, hot = 0", jsCold, goPool)
	diff("hot sandbox (e2b JS SDK, default − hot = 0)", jsPool, jsCold)
	diff("hot sandbox (HTTP, default − hot = 0)", rawPool, rawCold)
	diff("checkpointable pool (e2b JS SDK, checkpointable − image pool, 1 hot each)", jsCk, jsPool)
	diff("checkpointable pool (HTTP, checkpointable − image pool, 1 hot each)", rawCk, rawPool)
	diff("lease template (e2b JS SDK, lease − image pool with 1 hot)", jsLease, jsPool)
	diff("lease template (HTTP, lease − image pool with 1 hot)", rawLease, rawPool)
	diff("service overhead on leases (HTTP → gvx serve − Go SDK)", rawLease, goLease)
	if c := jsPool.Concurrent; c != nil {
		fmt.Printf("%d concurrent commands.run over %d sandboxes: %.0f ms, %d errors", c.Commands, c.Sandboxes, c.MS, c.Errors)
		if c.FirstError != nil {
			fmt.Printf(" (first: %s)", *c.FirstError)
		}
		fmt.Println()
		if c.Errors > 0 {
			return fmt.Errorf("%d of %d concurrent commands failed", c.Errors, c.Commands)
		}
	}
	return nil
}

// goSDK measures the Go SDK: New + Exec + Close, then a pool's Acquire +
// Exec + Release.
func goSDK(ctx context.Context, socket, state, bin, image string, plainRuns, runs, poolSize int) (plain, pooled, leased sdkResult, err error) {
	c, err := gvx.Connect(ctx, gvx.Options{Containerd: socket, Namespace: "gvxbenchgo", StateDir: state, BinDir: bin})
	if err != nil {
		return plain, pooled, leased, err
	}
	defer c.Close(ctx)
	cfg := gvx.Config{Image: image, Entrypoint: []string{"sleep", "infinity"}}
	cmd := []string{"/bin/bash", "-l", "-c", "true"}
	eo := gvx.ExecOptions{User: "user", Dir: "/home/user", Env: []string{"HOME=/home/user", "USER=user", "LOGNAME=user"}}
	cycle := func(create func() (*gvx.Sandbox, error), r *sdkResult) error {
		t0 := time.Now()
		sb, err := create()
		if err != nil {
			return err
		}
		res, err := sb.Exec(ctx, cmd, eo)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("true exited %d: %s", res.ExitCode, res.Stderr)
		}
		t1 := time.Now()
		if cerr := sb.Close(ctx); err == nil {
			err = cerr
		}
		r.CreateRun = append(r.CreateRun, ms(t1.Sub(t0)))
		r.Cycle = append(r.Cycle, ms(time.Since(t0)))
		return err
	}
	newSB := func() (*gvx.Sandbox, error) { return c.New(ctx, cfg) }
	var warm sdkResult
	if plainRuns > 0 {
		if err := cycle(newSB, &warm); err != nil {
			return plain, pooled, leased, err
		}
	}
	for i := 0; i < plainRuns; i++ {
		if err := cycle(newSB, &plain); err != nil {
			return plain, pooled, leased, err
		}
	}
	p, err := c.NewPool(ctx, gvx.PoolConfig{Name: "benchgo", Template: cfg, Size: poolSize})
	if err != nil {
		return plain, pooled, leased, err
	}
	closePool := sync.OnceValue(func() error { return p.Close(ctx) })
	defer closePool()
	acquire := func() (*gvx.Sandbox, error) { return p.Acquire(ctx, gvx.AcquireOptions{}) }
	for i := 0; i <= runs; i++ {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := p.WaitReady(wctx, poolSize)
		cancel()
		if err != nil {
			return plain, pooled, leased, err
		}
		r := &pooled
		if i == 0 {
			r = &warm
		}
		if err := cycle(acquire, r); err != nil {
			return plain, pooled, leased, err
		}
	}
	if err := closePool(); err != nil {
		return plain, pooled, leased, err
	}
	// A lease pool's Lease + Exec + Release.
	lp, err := c.NewPool(ctx, gvx.PoolConfig{Name: "benchgolease", Template: gvx.Config{Image: image}, Size: poolSize, Leases: true})
	if err != nil {
		return plain, pooled, leased, err
	}
	defer lp.Close(ctx)
	for i := 0; i <= runs; i++ {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := lp.WaitReady(wctx, poolSize)
		cancel()
		if err != nil {
			return plain, pooled, leased, err
		}
		t0 := time.Now()
		l, err := lp.Lease(ctx)
		if err != nil {
			return plain, pooled, leased, err
		}
		res, err := l.Exec(ctx, cmd, eo)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("true exited %d: %s", res.ExitCode, res.Stderr)
		}
		t1 := time.Now()
		if rerr := l.Release(ctx); err == nil {
			err = rerr
		}
		if err != nil {
			return plain, pooled, leased, err
		}
		if i > 0 {
			leased.CreateRun = append(leased.CreateRun, ms(t1.Sub(t0)))
			leased.Cycle = append(leased.Cycle, ms(time.Since(t0)))
		}
	}
	return plain, pooled, leased, nil
}

// service is the bench's gvx serve.
type service struct{ *harness.Serve }

func startServe(dir string, bins harness.Bins, socket, image string, poolSize int) (*service, error) {
	tmpl := fmt.Sprintf("[[template]]\nname = \"base\"\nimage = %[1]q\n\n[[template]]\nname = \"pooled\"\nimage = %[1]q\npool_size = %[2]d\n\n[[template]]\nname = \"cold\"\nimage = %[1]q\npool_size = %[2]d\nhot = 0\n\n[[template]]\nname = \"ckpooled\"\nimage = %[1]q\npool_size = %[2]d\ncheckpointable = true\n\n[[template]]\nname = \"leased\"\nimage = %[1]q\npool_size = %[2]d\nlease = true\n", image, poolSize)
	s, err := harness.StartServe(dir, bins, socket, tmpl)
	if err != nil {
		return nil, err
	}
	return &service{s}, nil
}

// node runs bench.mjs for template.
func (s *service) node(mods, template string, runs, conc int) (sdkResult, error) {
	var r sdkResult
	cmd := exec.Command("node", "bench/serve/bench.mjs")
	cmd.Env = append(os.Environ(), "E2B_API_URL="+s.URL, "E2B_SANDBOX_URL="+s.URL, "E2B_API_KEY="+s.Key,
		"E2B_MODULE="+filepath.Join(mods, "e2b", "dist", "index.mjs"), "TEMPLATE="+template,
		fmt.Sprintf("N=%d", runs), fmt.Sprintf("CONCURRENT=%d", conc))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return r, fmt.Errorf("bench.mjs (%s): %w", template, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		return r, fmt.Errorf("bench.mjs (%s): %w: %s", template, err, out)
	}
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func pct(v []float64, p int) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := (len(s)*p+99)/100 - 1
	if i < 0 {
		i = 0
	}
	return s[i]
}
