package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	coci "github.com/containerd/containerd/v2/pkg/oci"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/pool/bootspec"
	"github.com/gvxrun/gvx/pool/client"
	"github.com/gvxrun/gvx/sandbox"
	"github.com/gvxrun/gvx/shim"
)

// resetPool starts a pool of one sandbox (max_size 1) with its metrics on
// a unix socket, and returns it, a scrape of one series and the ctr run
// flags of a task with testdata/resetprobe at /t and CAP_SYS_ADMIN.
func resetPool(t *testing.T) (*harness.Pool, func(series string) float64, []string) {
	t.Helper()
	bin := buildTestdata(t, "resetprobe")
	sock := filepath.Join(t.TempDir(), "metrics.sock")
	p := startPoolWith(t, 1, fmt.Sprintf("max_size = 1\n[metrics]\nlisten = %q\n", "unix://"+sock))
	metric := scraper(t, sock)
	opts := []string{"--cap-add", "CAP_SYS_ADMIN", "--mount", "type=bind,src=" + filepath.Dir(bin) + ",dst=/t,options=rbind:ro"}
	return p, metric, opts
}

// waitFile waits until file exists in task id's container and returns
// the output of `cat files...` there.
func waitFile(t *testing.T, id, file string, files ...string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; ; n++ {
		r, err := e.ctrResult(context.Background(), "task", "exec", "--exec-id", fmt.Sprintf("w%d", n), id, "test", "-e", file)
		if err == nil && r.code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s never appeared", id, file)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return mustCtr(t, append([]string{"task", "exec", "--exec-id", "cat", id, "cat"}, files...)...)
}

// waitResets waits until pool p has put n reset sandboxes back on its
// ready list (it verifies them after their task's delete returned).
func waitResets(t *testing.T, p *harness.Pool, n int) {
	t.Helper()
	cfg, err := config.Load(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := client.Query(context.Background(), cfg.PoolSocket())
		if err == nil && st.Reset >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool reset %+v (%v), want %d; pool log:\n%s", st, err, n, p.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitSandboxGone waits until pool sandbox sb is gone from the host.
func waitSandboxGone(t *testing.T, p *harness.Pool, sb string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(string(harness.SandboxDir(sb))); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still there; pool log:\n%s", sb, p.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// deleteTask kills task id, waits for it to stop and deletes it.
func deleteTask(t *testing.T, id string) {
	t.Helper()
	mustCtr(t, "task", "kill", "-s", "KILL", id)
	waitStatus(t, id, "STOPPED")
	mustCtr(t, "task", "rm", id)
	mustCtr(t, "container", "rm", id)
}

// TestPoolReset: a task in a pool sandbox writes files (its rootfs, /tmp,
// /dev/shm), leaves background processes (uid 1000 ones that exhaust its
// RLIMIT_NPROC, which gVisor counts per uid across the sandbox), creates
// SysV shared memory, a semaphore set and a message queue, changes its
// env, cwd and the hostname (which every container of a gVisor sandbox
// shares); deleted, its sandbox is reset and goes back to the pool; the
// next task adopts the very same sandbox (id and Sentry pid) and sees none
// of it, and the reset is counted.
func TestPoolReset(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	p, metric, opts := resetPool(t)
	sb := runAdopted(t, p, "reset1", opts, "sh", "-c",
		`hostname >/tmp/fresh-host; /t/resetprobe fork 16 >/tmp/fork-fresh
		echo a >/rootfile; echo b >/tmp/t; echo c >/dev/shm/s; export FOO=dirty; cd /tmp
		/t/resetprobe dirty >/tmp/dirty 2>&1; /t/resetprobe fork 16 keep >/tmp/fork-kept; sleep 1000 &
		/t/resetprobe state >/tmp/state; touch /tmp/ready; exec sleep 1000`)
	pid, err := harness.SandboxPid(sb)
	if err != nil {
		t.Fatal(err)
	}
	out := waitFile(t, "reset1", "/tmp/ready", "/tmp/fresh-host", "/tmp/fork-fresh", "/tmp/dirty", "/tmp/fork-kept", "/tmp/state")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("reset1's probes: %q", out)
	}
	freshHost, forkFresh := lines[0], lines[1]
	// The attack ran: everything it leaves is there while it runs.
	if lines[2] != "dirty" || lines[3] != forkFresh || !strings.HasSuffix(forkFresh, "err=EAGAIN") || strings.HasPrefix(forkFresh, "forked=0 ") ||
		lines[4] != "shm=256 sem=1 msg=1 host=dirty-host" {
		t.Fatalf("reset1 did not leave its traces: %q", lines)
	}
	if ps := mustCtr(t, "task", "exec", "--exec-id", "ps", "reset1", "ps"); strings.Count(ps, "sleep 1000") < 17 {
		t.Fatalf("reset1's background processes are not running:\n%s", ps)
	}
	deleteTask(t, "reset1")
	d := harness.SandboxDir(sb)
	if _, err := os.Stat(d.Claimed()); !os.IsNotExist(err) {
		t.Fatalf("pool sandbox %s not back in the pool after its task (claimed marker: %v); pool log:\n%s", sb, err, p.Log())
	}
	waitResets(t, p, 1)
	if v := metric(`gvx_pool_resets_total{component="pool",result="reset"}`); v != 1 {
		t.Errorf("resets counted: %v, want 1; pool log:\n%s", v, p.Log())
	}

	sb2 := runAdopted(t, p, "reset2", opts, "sh", "-c",
		`{ hostname; /t/resetprobe state; /t/resetprobe fork 16; env; pwd
		for f in /rootfile /tmp/t /tmp/fresh-host /dev/shm/s; do test -e $f && echo "left: $f"; done; } >/tmp/out 2>&1
		ps >/tmp/ps; touch /tmp/ready; exec sleep 1000`)
	if sb2 != sb {
		t.Fatalf("reset2 adopted %s, not the reset %s", sb2, sb)
	}
	if pid2, err := harness.SandboxPid(sb2); err != nil || pid2 != pid {
		t.Fatalf("sandbox %s's Sentry is pid %d (%v), was %d: not the same sandbox", sb, pid2, err, pid)
	}
	ps := waitFile(t, "reset2", "/tmp/ready", "/tmp/ps")
	// Its own shell and ps, nothing else.
	if lines := strings.Split(strings.TrimSpace(ps), "\n"); len(lines) != 3 || strings.Contains(ps, " 1000 ") {
		t.Errorf("reset2 sees foreign processes:\n%s", ps)
	}
	logs := waitFile(t, "reset2", "/tmp/ready", "/tmp/out")
	deleteTask(t, "reset2")
	waitResets(t, p, 2)
	for _, want := range []string{freshHost, "shm=0 sem=0 msg=0 host=" + freshHost, forkFresh, "\n/\n"} {
		if !strings.Contains(logs, want) {
			t.Errorf("reset2's output lacks %q:\n%s", want, logs)
		}
	}
	for _, bad := range []string{"left:", "FOO=", "dirty"} {
		if strings.Contains(logs, bad) {
			t.Errorf("reset2's output has %q:\n%s", bad, logs)
		}
	}
	if v := metric(`gvx_pool_resets_total{component="pool",result="reset"}`); v != 2 {
		t.Errorf("resets counted: %v, want 2", v)
	}
	t.Logf("reset (release in the shim, then restore, probe, verify in the pool server): %.0f ms on average over 2",
		1000*metric(`gvx_operation_seconds_sum{component="pool",op="reset"}`)/2)
}

// TestPoolResetRefused: a sandbox whose reset does not verify is
// destroyed, not reused — the test plants a guest process in the
// sandbox's root container, beyond the task's reach, which the verifier
// must find — and a sandbox that served pool.max_uses tasks is destroyed
// too; both are counted by reason, and nothing leaks.
func TestPoolResetRefused(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	sock := filepath.Join(t.TempDir(), "metrics.sock")
	p := startPoolWith(t, 1, fmt.Sprintf("max_size = 1\nmax_uses = 2\n[metrics]\nlisten = %q\n", "unix://"+sock))
	metric := scraper(t, sock)

	sb := runAdopted(t, p, "refuse1", nil, "sleep", "1000")
	rec, err := sandbox.Load(harness.SandboxDir(sb).Record())
	if err != nil {
		t.Fatal(err)
	}
	sentry := filepath.Join(e.gvxBin, api.SentryBinary)
	plant := rec.Command(context.Background(), sentry, "exec", sb, rec.Pool.Pause)
	if err := plant.Start(); err != nil {
		t.Fatal(err)
	}
	planted := make(chan error, 1)
	go func() { planted <- plant.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := rec.Probe(context.Background(), false)
		if err == nil && slices.ContainsFunc(st.Processes, func(p string) bool { return strings.HasSuffix(p, " pause") }) {
			t.Logf("planted in %s: %v", sb, st.Processes)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("planted process never showed in %s: %+v %v", sb, st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	deleteTask(t, "refuse1")
	waitSandboxGone(t, p, sb)
	select {
	case <-planted:
	case <-time.After(20 * time.Second):
		t.Error("the planted exec outlived its sandbox")
	}
	if v := metric(`gvx_pool_resets_total{component="pool",result="processes"}`); v != 1 {
		t.Errorf("failed verifications (processes) counted: %v, want 1; pool log:\n%s", v, p.Log())
	}
	if !strings.Contains(p.Log(), "not reset (processes)") {
		t.Errorf("the pool log does not say why %s was not reset:\n%s", sb, p.Log())
	}

	// pool.max_uses = 2: reset after the first task, destroyed after the
	// second.
	if err := p.WaitReady(context.Background(), 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	sb = runAdopted(t, p, "refuse2", nil, "true")
	waitStatus(t, "refuse2", "STOPPED")
	mustCtr(t, "task", "rm", "refuse2")
	mustCtr(t, "container", "rm", "refuse2")
	waitResets(t, p, 1)
	if got := runAdopted(t, p, "refuse3", nil, "true"); got != sb {
		t.Fatalf("refuse3 adopted %s, not the reset %s", got, sb)
	}
	waitStatus(t, "refuse3", "STOPPED")
	mustCtr(t, "task", "rm", "refuse3")
	mustCtr(t, "container", "rm", "refuse3")
	if _, err := os.Stat(string(harness.SandboxDir(sb))); !os.IsNotExist(err) {
		t.Errorf("sandbox %s still there after pool.max_uses tasks (%v)", sb, err)
	}
	if v := metric(`gvx_pool_resets_total{component="pool",result="max_uses"}`); v != 1 {
		t.Errorf("max_uses destroys counted: %v, want 1", v)
	}
	if v := metric(`gvx_pool_resets_total{component="pool",result="reset"}`); v != 1 {
		t.Errorf("resets counted: %v, want 1", v)
	}
}

// TestPoolResetCrash: the shim is killed right after the pool took its
// task's reset sandbox back, before it recorded so; containerd's cleanup
// after the dead shim must leave the sandbox to the pool (its claimed
// marker no longer names the task), and the next task adopts it.
func TestPoolResetCrash(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	p := startPoolWith(t, 1, "max_size = 1\n")
	sb := runAdopted(t, p, "rcrash1", []string{"--annotation", shim.FaultAnnotation + "=" + shim.FaultReset}, "true")
	waitStatus(t, "rcrash1", "STOPPED")
	r, _ := e.ctrResult(context.Background(), "task", "rm", "rcrash1")
	t.Logf("task rm with the shim crashing: exit %d %s", r.code, strings.TrimSpace(r.stderr))
	deadline := time.Now().Add(20 * time.Second)
	if !waitLogged(shim.FaultLog+" "+shim.FaultReset+" of task rcrash1", time.Until(deadline)) {
		t.Fatal("the shim never crashed after the reset")
	}
	for {
		out, _, _ := e.ctr(context.Background(), "task", "ls")
		if !strings.Contains(out, "rcrash1 ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task rcrash1 still listed:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mustCtr(t, "container", "rm", "rcrash1")
	waitResets(t, p, 1)
	if got := runAdopted(t, p, "rcrash2", nil, "sleep", "100"); got != sb {
		t.Fatalf("rcrash2 adopted %s, not %s (the cleanup after the crashed shim destroyed it?); pool log:\n%s", got, sb, p.Log())
	}
	deleteTask(t, "rcrash2")
}

// scraper returns a reader of one series of the metrics at unix socket
// sock (0 when absent).
func scraper(t *testing.T, sock string) func(series string) float64 {
	return func(series string) float64 {
		t.Helper()
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
		resp, err := c.Get("http://pool/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9.e+]+)$`).FindStringSubmatch(string(b))
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
}

// TestPoolResetOOMScore: a reset pool's task that asks for an OOM score
// gets it on its sandbox's host process (gVisor's create sets the
// lowest its containers ask for); the task's delete — gvx-runtime's,
// without gvx-sentry — puts the sandbox's original score back before the
// sandbox returns to the pool, so the next task does not inherit it.
func TestPoolResetOOMScore(t *testing.T) {
	c, ctx, img := clientEnv(t)
	checkNoLeaks(t)
	p := startPoolWith(t, 1, "max_size = 1\n")
	score := 777
	cont := newContainerWith(t, c, ctx, img, "oomscore", &runtimeoptions.Options{ConfigPath: p.Config},
		coci.WithProcessArgs("sleep", "1000"),
		func(_ context.Context, _ coci.Client, _ *containers.Container, s *coci.Spec) error {
			s.Process.OOMScoreAdj = &score
			return nil
		})
	task, exit := startTask(t, ctx, cont, cio.NullIO)
	sb := harness.Adopted(testNS, "oomscore")
	if sb == "" {
		t.Fatalf("oomscore did not adopt a pool sandbox; pool log:\n%s", p.Log())
	}
	pid, err := harness.SandboxPid(sb)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(harness.SandboxDir(sb).Root().SandboxState(sb))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Sandbox struct {
			Original int `json:"originalOomScoreAdj"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	if st.Sandbox.Original == score {
		t.Fatalf("the pool sandbox booted with oom_score_adj %d already", score)
	}
	if got := oomScoreAdj(t, pid); got != score {
		t.Errorf("the sandbox's oom_score_adj with the task: %d, want %d", got, score)
	}
	if err := task.Kill(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exit
	if _, err := task.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	waitResets(t, p, 1)
	if got := oomScoreAdj(t, pid); got != st.Sandbox.Original {
		t.Errorf("the reset sandbox's oom_score_adj: %d, want its original %d", got, st.Sandbox.Original)
	}
}

// TestPoolHostname: a task that adopts a pool sandbox with a hostname of
// its own (ctr --hostname, nerdctl's, a pod's) sees it, although gVisor
// runs every container in the root container's UTS namespace, which the
// pool booted with its own; the reset puts the pool's back for the next
// task.
func TestPoolHostname(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	p, _, opts := resetPool(t)
	script := `hostname >/tmp/h; touch /tmp/ready; exec sleep 1000`
	sb := runAdopted(t, p, "host1", append(slices.Clone(opts), "--hostname", "task-one"), "sh", "-c", script)
	if got := strings.TrimSpace(waitFile(t, "host1", "/tmp/ready", "/tmp/h")); got != "task-one" {
		t.Errorf("hostname in a pool task run with --hostname task-one: %q", got)
	}
	deleteTask(t, "host1")
	waitResets(t, p, 1)
	if sb2 := runAdopted(t, p, "host2", opts, "sh", "-c", script); sb2 != sb {
		t.Fatalf("host2 adopted %s, not the reset %s", sb2, sb)
	}
	if got := strings.TrimSpace(waitFile(t, "host2", "/tmp/ready", "/tmp/h")); got != bootspec.Hostname {
		t.Errorf("hostname in the next task of the reset sandbox: %q, want the pool's %s", got, bootspec.Hostname)
	}
	deleteTask(t, "host2")
	waitResets(t, p, 2)
}
