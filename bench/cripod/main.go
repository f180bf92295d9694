// Command cripod benchmarks a Kubernetes pod's start to its first exec
// through CRI, as the kubelet drives it: RunPodSandbox → CreateContainer
// → StartContainer → ExecSync, for gvx booting the pod's sandbox (cold),
// gvx adopting a warm-pool sandbox (the pod's interfaces attached to the
// running sandbox), runsc of the same gVisor version driven by
// containerd's runc shim, and runc, in one run on one private containerd
// with a bridge CNI network. Each pod has a cgroup parent as the kubelet
// gives one (cgroupfs driver: a pod cgroup made before RunPodSandbox and
// removed after the pod), so the pool path's move of the adopted sandbox
// into it is timed (and, beside it, pool pods without a parent, whose
// sandbox stays in the pool's cgroup). Cycles are interleaved (one per runtime in
// turn), the pod removed untimed after each. It prints p50/p95 of the
// whole and of each step, and the ratios the pool path is held to.
// `make bench` runs it.
//
// runsc under the runc shim is off by default: on this host its pods'
// application containers never run (StartContainer hangs, or the
// container is stopped at its first exec), and the failed pod leaves
// processes and state behind; -runsc tries it.
//
//	go run ./bench/cripod [-runs 20] [-pool 4] [-runsc]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
)

const (
	criNS  = "k8s.io"
	bridge = "gvxbench0"
	subnet = "10.78.0.0/24"
)

// steps of one cycle, in order.
var steps = []string{"runp", "create", "start", "exec"}

type peer struct {
	name, handler string
	pool          *harness.Pool // serves this runtime's pods
	// quiet is the pool every cycle waits to be full first, whichever
	// runtime's: no refill boot runs during a timed pod.
	quiet   *harness.Pool
	total   []time.Duration
	step    map[string][]time.Duration
	adopted int
	failed  error // the cycle that failed; the runtime is left out from then on
	// noParent: the pod has no cgroup parent (as crictl's pods), so an
	// adopted sandbox stays in its pool's cgroup.
	noParent bool
}

func main() {
	runs := flag.Int("runs", 20, "pods per runtime")
	poolSize := flag.Int("pool", 4, "ready sandboxes of the warm pool")
	withRunsc := flag.Bool("runsc", false, "include runsc under containerd's runc shim (its pods' application containers fail here and leave host state behind: docs/benchmarks.md)")
	flag.Parse()
	if err := run(*runs, *poolSize, *withRunsc); err != nil {
		fmt.Fprintf(os.Stderr, "bench cripod: %v\n", err)
		os.Exit(1)
	}
}

func run(runs, poolSize int, withRunsc bool) error {
	ctx, stop := harness.Interruptible(namespaces.WithNamespace(context.Background(), criNS), "bench")
	defer stop()
	bins := harness.BinsFromEnv()
	images := os.Getenv("IMAGES")
	if bins.GVX == "" || bins.Containerd == "" || bins.Runsc == "" || images == "" {
		return fmt.Errorf("run through `make bench` (needs GVX_BIN, CONTAINERD_BIN, RUNSC_BIN, IMAGES)")
	}
	dir, err := os.MkdirTemp("", "gvx-bench-cripod-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	defer harness.RemoveCgroup(kubepods)
	pl, err := harness.StartPool(ctx, bins.GVX, dir, poolSize)
	if err != nil {
		return err
	}
	defer func() {
		if err := pl.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "bench cripod: %v\n", err)
		}
	}()
	cniDir := filepath.Join(dir, "cni")
	if err := os.MkdirAll(cniDir, 0o755); err != nil {
		return err
	}
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"gvxbench","plugins":[
  {"type":"bridge","bridge":%q,"isGateway":true,"isDefaultGateway":true,"ipMasq":false,
   "ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"dataDir":%q}},
  {"type":"loopback"}]}`, bridge, subnet, filepath.Join(dir, "ipam"))
	if err := os.WriteFile(filepath.Join(cniDir, "10-gvxbench.conflist"), []byte(conf), 0o644); err != nil {
		return err
	}
	defer func() { _ = exec.Command("ip", "link", "del", bridge).Run() }()
	c, err := harness.StartWithConfig(ctx, bins, fmt.Sprintf(`
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "gvx.test/pause:latest"
# runsc's start of a pod sandbox under the runc shim cannot lower the
# sandbox's oom_score_adj to CRI's -998 here; every runtime gets the same.
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = %q
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.gvxpool]
  runtime_type = %q
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.gvxpool.options]
  ConfigPath = %q
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc.options]
  BinaryName = %q
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
`, cniDir, api.RuntimeType, pl.Config, filepath.Join(bins.Runsc, "runsc")))
	if err != nil {
		return err
	}
	defer c.Close()
	for _, img := range []string{"busybox.tar", "pause.tar"} {
		out, err := exec.Command(filepath.Join(bins.Containerd, "ctr"), "--address", c.Socket(), "--namespace", criNS,
			"images", "import", filepath.Join(images, img)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("import %s: %v: %s", img, err, out)
		}
	}
	conn, err := grpc.NewClient("unix://"+c.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rs := runtimeapi.NewRuntimeServiceClient(conn)

	peers := []*peer{
		{name: "gvx", handler: "gvx"},
		{name: "gvx (warm pool)", handler: "gvxpool", pool: pl},
		{name: "runsc (runc shim)", handler: "runsc"},
		{name: "runc", handler: "runc"},
		{name: "gvx (pool, no parent)", handler: "gvxpool", pool: pl, noParent: true},
	}
	if !withRunsc {
		peers[2].failed = fmt.Errorf("not run (-runsc)")
	}
	for _, p := range peers {
		p.step, p.quiet = map[string][]time.Duration{}, pl
		if p.failed != nil {
			continue
		}
		// One untimed pod each: images, caches and the shims' first
		// start.
		if _, _, err := cycle(ctx, rs, p, "warm"); err != nil {
			p.failed = fmt.Errorf("first pod: %w", err)
			fmt.Fprintf(os.Stderr, "bench cripod: %s: %v\n", p.name, p.failed)
		}
	}
	fmt.Printf("gvx bench cripod: %d pods per runtime, RunPodSandbox → CreateContainer (busybox sleep) → StartContainer → ExecSync (true), containerd %s CRI, bridge CNI, %d CPUs, pool of %d\n\n",
		runs, "v2.4.2", goruntime.NumCPU(), poolSize)
	for i := 0; i < runs; i++ {
		for _, p := range peers {
			if p.failed != nil {
				continue
			}
			total, st, err := cycle(ctx, rs, p, fmt.Sprint(i))
			if err != nil {
				p.failed = fmt.Errorf("pod %d: %w", i, err)
				fmt.Fprintf(os.Stderr, "bench cripod: %s: %v\n", p.name, p.failed)
				continue
			}
			p.total = append(p.total, total)
			for k, v := range st {
				p.step[k] = append(p.step[k], v)
			}
		}
	}
	fmt.Printf("%-22s %9s %9s   %s\n", "runtime", "p50", "p95", "p50 of each step: "+strings.Join(steps, " / "))
	for _, p := range peers {
		if p.failed != nil {
			fmt.Printf("%-22s failed: %v\n", p.name, p.failed)
			continue
		}
		var each []string
		for _, s := range steps {
			each = append(each, fmt.Sprintf("%.1f", ms(harness.Percentile(p.step[s], 50))))
		}
		fmt.Printf("%-22s %7.1fms %7.1fms   %s ms\n", p.name, ms(harness.Percentile(p.total, 50)), ms(harness.Percentile(p.total, 95)), strings.Join(each, " / "))
	}
	fmt.Println()
	pool, cold, runsc, runc, bare := peers[1], peers[0], peers[2], peers[3], peers[4]
	ratio := func(a, b *peer, pct int) float64 {
		return ms(harness.Percentile(a.total, pct)) / ms(harness.Percentile(b.total, pct))
	}
	fmt.Printf("pods that adopted a pool sandbox: %d/%d (no cgroup parent: %d/%d)\n", pool.adopted, runs, bare.adopted, runs)
	for _, b := range []*peer{runsc, runc, cold, bare} {
		if b.failed != nil || pool.failed != nil {
			continue
		}
		fmt.Printf("gvx (warm pool) / %-18s p50 %.2fx  p95 %.2fx\n", b.name+":", ratio(pool, b, 50), ratio(pool, b, 95))
	}
	if cold.failed != nil || runsc.failed != nil {
		return nil
	}
	fmt.Printf("gvx / %-30s p50 %.2fx  p95 %.2fx\n", "runsc (runc shim):", ratio(cold, runsc, 50), ratio(cold, runsc, 95))
	return nil
}

// cycle starts one pod of p with a container and runs one exec in it,
// timing each call, then removes the pod (untimed).
func cycle(ctx context.Context, rs runtimeapi.RuntimeServiceClient, p *peer, name string) (time.Duration, map[string]time.Duration, error) {
	// A pool sized for the load: each timed pool pod finds a ready
	// sandbox, and no pod of any runtime shares the CPUs with a refill.
	if err := p.quiet.WaitReady(ctx, p.quiet.Size(), time.Minute); err != nil {
		return 0, nil, err
	}
	uid := fmt.Sprintf("%s-%s-%d", p.handler, name, time.Now().UnixNano())
	parent := ""
	if !p.noParent {
		parent = kubepods + "/pod" + uid
		if err := harness.MakeCgroup(parent); err != nil {
			return 0, nil, err
		}
		defer harness.RemoveCgroup(parent)
	}
	podCfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "bench-" + p.handler + "-" + name, Namespace: "default", Uid: uid},
		Linux:    &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent},
	}
	st := map[string]time.Duration{}
	// No call may hang the run (a peer that cannot serve pods fails).
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	t0 := time.Now()
	runp, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: p.handler})
	if err != nil {
		return 0, nil, fmt.Errorf("RunPodSandbox: %w", err)
	}
	pod := runp.PodSandboxId
	defer func() {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer ccancel()
		_, _ = rs.StopPodSandbox(cctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod})
		_, _ = rs.RemovePodSandbox(cctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod})
	}()
	t1 := time.Now()
	st["runp"] = t1.Sub(t0)
	cr, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
			Image:    &runtimeapi.ImageSpec{Image: "gvx.test/busybox:latest"},
			Command:  []string{"sleep", "600"},
			Linux:    &runtimeapi.LinuxContainerConfig{},
		},
		SandboxConfig: podCfg,
	})
	if err != nil {
		return 0, nil, fmt.Errorf("CreateContainer: %w", err)
	}
	t2 := time.Now()
	st["create"] = t2.Sub(t1)
	if _, err := rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cr.ContainerId}); err != nil {
		return 0, nil, fmt.Errorf("StartContainer: %w", err)
	}
	t3 := time.Now()
	st["start"] = t3.Sub(t2)
	ex, err := rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: cr.ContainerId, Cmd: []string{"true"}, Timeout: 30})
	if err != nil {
		return 0, nil, fmt.Errorf("ExecSync: %w", err)
	}
	t4 := time.Now()
	st["exec"] = t4.Sub(t3)
	if ex.ExitCode != 0 {
		return 0, nil, fmt.Errorf("ExecSync: exit %d: %s", ex.ExitCode, ex.Stderr)
	}
	if p.pool != nil && name != "warm" {
		if harness.Adopted(criNS, pod) != "" {
			p.adopted++
		}
	}
	return t4.Sub(t0), st, nil
}

// kubepods is the cgroup the pods' cgroups are made in, as the kubelet's
// /kubepods.
var kubepods = fmt.Sprintf("/gvxbench-kubepods-%d", os.Getpid())

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
