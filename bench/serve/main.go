// Command serve benchmarks gvx serve against gvx's Go SDK.
//
// On a private containerd it measures, p50/p95 over -runs cycles, create +
// first command + kill of an E2B sandbox two ways: through `gvx serve`
// with the official e2b JS SDK (Sandbox.create, commands.run('true'),
// kill), and through the Go SDK directly (New, Exec of the same
// `/bin/bash -l -c true` as user, Close) — each from a template without a
// pool and from one with a ready pool (the bench waits until the pool is
// full before each cycle). The service's overhead is the difference. Then
// -concurrent commands.run at once through the service. `make bench` runs
// it.
//
//	go run ./bench/serve [-runs 20] [-pool 2] [-concurrent 100]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/integration/harness"
)

func main() {
	runs := flag.Int("runs", 20, "timed cycles per path")
	pool := flag.Int("pool", 2, "ready sandboxes of the pooled template")
	conc := flag.Int("concurrent", 100, "commands.run at once through the service")
	flag.Parse()
	if err := run(*runs, *pool, *conc); err != nil {
		fmt.Fprintf(os.Stderr, "bench/serve: %v\n", err)
		os.Exit(1)
	}
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

func run(runs, poolSize, conc int) error {
	ctx := context.Background()
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
	defer os.RemoveAll(dir)

	fmt.Println("bench/serve: the Go SDK directly")
	goPlain, goPool, err := goSDK(ctx, ctrd.Socket(), filepath.Join(dir, "sdk"), image, runs, poolSize)
	if err != nil {
		return fmt.Errorf("go SDK: %w", err)
	}

	fmt.Println("bench/serve: gvx serve with the e2b JS SDK")
	mods, err := harness.NPMModules("integration/e2b", "e2b", os.Stdout)
	if err != nil {
		return err
	}
	srv, err := startServe(dir, bins, ctrd.Socket(), image, poolSize)
	if err != nil {
		return err
	}
	defer srv.stop()
	jsPlain, err := srv.node(mods, "base", runs, 0)
	if err != nil {
		return err
	}
	jsPool, err := srv.node(mods, "pooled", runs, conc)
	if err != nil {
		return err
	}

	fmt.Printf("\ncreate + first command (p50 / p95 ms, %d cycles each; the cycle adds kill)\n\n", runs)
	fmt.Println("| path | template | create + first command p50 | p95 | full cycle p50 | p95 |")
	fmt.Println("|---|---|---|---|---|---|")
	row := func(path, tmpl string, cr, cy []float64) {
		fmt.Printf("| %s | %s | %.1f | %.1f | %.1f | %.1f |\n", path, tmpl, pct(cr, 50), pct(cr, 95), pct(cy, 50), pct(cy, 95))
	}
	row("Go SDK", "no pool", goPlain.CreateRun, goPlain.Cycle)
	row("e2b JS SDK → gvx serve", "no pool", jsPlain.CreateRun, jsPlain.Cycle)
	row("Go SDK", fmt.Sprintf("pool of %d", poolSize), goPool.CreateRun, goPool.Cycle)
	row("e2b JS SDK → gvx serve", fmt.Sprintf("pool of %d", poolSize), jsPool.CreateRun, jsPool.Cycle)
	fmt.Printf("\nservice overhead (p50 difference, create + first command): %.1f ms without a pool, %.1f ms with one\n",
		pct(jsPlain.CreateRun, 50)-pct(goPlain.CreateRun, 50), pct(jsPool.CreateRun, 50)-pct(goPool.CreateRun, 50))
	fmt.Printf("service overhead (p50 difference, full cycle): %.1f ms without a pool, %.1f ms with one\n",
		pct(jsPlain.Cycle, 50)-pct(goPlain.Cycle, 50), pct(jsPool.Cycle, 50)-pct(goPool.Cycle, 50))
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
func goSDK(ctx context.Context, socket, state, image string, runs, poolSize int) (plain, pooled sdkResult, err error) {
	c, err := gvx.Connect(ctx, gvx.Options{Containerd: socket, Namespace: "gvxbenchgo", StateDir: state})
	if err != nil {
		return plain, pooled, err
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
	if err := cycle(newSB, &warm); err != nil {
		return plain, pooled, err
	}
	for i := 0; i < runs; i++ {
		if err := cycle(newSB, &plain); err != nil {
			return plain, pooled, err
		}
	}
	p, err := c.NewPool(ctx, gvx.PoolConfig{Name: "benchgo", Template: cfg, Size: poolSize})
	if err != nil {
		return plain, pooled, err
	}
	defer p.Close(ctx)
	acquire := func() (*gvx.Sandbox, error) { return p.Acquire(ctx, gvx.AcquireOptions{}) }
	for i := 0; i <= runs; i++ {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := p.WaitReady(wctx, poolSize)
		cancel()
		if err != nil {
			return plain, pooled, err
		}
		r := &pooled
		if i == 0 {
			r = &warm
		}
		if err := cycle(acquire, r); err != nil {
			return plain, pooled, err
		}
	}
	return plain, pooled, nil
}

type service struct {
	cmd *exec.Cmd
	url string
	key string
}

func startServe(dir string, bins harness.Bins, socket, image string, poolSize int) (*service, error) {
	key := "e2b_" + strings.Repeat("0123456789", 4)
	if err := os.WriteFile(filepath.Join(dir, "keys"), []byte(key+" bench\n"), 0o600); err != nil {
		return nil, err
	}
	tmpl := fmt.Sprintf("[[template]]\nname = \"base\"\nimage = %q\n\n[[template]]\nname = \"pooled\"\nimage = %q\npool_size = %d\n", image, image, poolSize)
	if err := os.WriteFile(filepath.Join(dir, "templates.toml"), []byte(tmpl), 0o644); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	s := &service{url: "http://" + addr, key: key}
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(filepath.Join(bins.GVX, "gvx"), "serve", "--listen", "tcp://"+addr, "--state-dir", filepath.Join(dir, "serve"),
		"--keys", filepath.Join(dir, "keys"), "--templates", filepath.Join(dir, "templates.toml"), "--containerd", socket, "--kill-on-exit", "--log-level", "warn")
	s.cmd.Env = append(os.Environ(), "PATH="+bins.Path())
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if resp, err := http.Get(s.url + "/healthz"); err == nil {
			resp.Body.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			b, _ := os.ReadFile(filepath.Join(dir, "serve.log"))
			return nil, fmt.Errorf("gvx serve did not answer:\n%s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *service) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

// node runs bench.mjs for template.
func (s *service) node(mods, template string, runs, conc int) (sdkResult, error) {
	var r sdkResult
	cmd := exec.Command("node", "bench/serve/bench.mjs")
	cmd.Env = append(os.Environ(), "E2B_API_URL="+s.url, "E2B_SANDBOX_URL="+s.url, "E2B_API_KEY="+s.key,
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
