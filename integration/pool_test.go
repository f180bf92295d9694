package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/containerd/v2/pkg/cio"
	coci "github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/typeurl/v2"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
)

// startPool runs `gvx pool serve` with a pool of size until the test ends.
func startPool(t *testing.T, size int) *harness.Pool {
	t.Helper()
	return startPoolWith(t, size, "")
}

// startPoolWith is startPool with more of the [pool] section's TOML.
func startPoolWith(t *testing.T, size int, extra string) *harness.Pool {
	t.Helper()
	p, err := harness.StartPoolWithConfig(context.Background(), e.gvxBin, t.TempDir(), size, extra)
	return stopAtCleanup(t, p, err)
}

// stopAtCleanup fails the test on err, else stops pool p when the test
// ends (an error of its stop fails the test).
func stopAtCleanup(t *testing.T, p *harness.Pool, err error) *harness.Pool {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func adopted(id string) string { return harness.Adopted(testNS, id) }

// runAdopted starts task id detached with the pool's config and returns
// the pool sandbox it adopted, failing the test if it booted its own.
func runAdopted(t *testing.T, p *harness.Pool, id string, opts []string, args ...string) string {
	t.Helper()
	cleanupTask(t, id)
	run := append(append([]string{"run", "-d", "--runtime", runtime, "--runtime-config-path", p.Config}, opts...), busybox, id)
	mustCtr(t, append(run, args...)...)
	sb := adopted(id)
	if sb == "" {
		t.Fatalf("%s did not adopt a pool sandbox; pool log:\n%s", id, p.Log())
	}
	return sb
}

// TestPoolRun: with a warm pool, `ctr run` adopts a booted sandbox: the
// task behaves exactly like one with its own (stdout/stderr, exit codes,
// signal deaths, exec, kill, ps), its host processes hold no privilege,
// each sandbox serves one task at a time, and nothing is left after delete.
func TestPoolRun(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	p := startPool(t, 2)
	cfgArgs := []string{"--runtime", runtime, "--runtime-config-path", p.Config}

	r, err := e.ctrResult(context.Background(), append(append([]string{"run", "--rm"}, cfgArgs...),
		busybox, "pool1", "sh", "-c", "uname -r; echo out; echo err >&2; exit 3")...)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 3 || len(lines) != 2 || !strings.Contains(lines[0], "gvisor") || lines[1] != "out" || strings.TrimSpace(r.stderr) != "err" {
		t.Errorf("run: exit %d stdout %q stderr %q, want 3, gVisor's release + \"out\", \"err\"", r.code, r.stdout, r.stderr)
	}
	for _, tc := range []struct {
		script string
		want   int
	}{{"exit 0", 0}, {"kill -9 $$", 137}, {"kill -15 $$", 143}} {
		r, err := e.ctrResult(context.Background(), append(append([]string{"run", "--rm"}, cfgArgs...), busybox, "pool2", "sh", "-c", tc.script)...)
		if err != nil {
			t.Fatal(err)
		}
		if r.code != tc.want {
			t.Errorf("%q: exit %d, want %d (stderr %q)", tc.script, r.code, tc.want, r.stderr)
		}
	}

	// A long-running task: it is in a pool sandbox, exec/ps/kill work.
	if err := p.WaitReady(context.Background(), 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	sb := runAdopted(t, p, "pool3", nil, "sh", "-c", `trap "echo got-term; exit 7" TERM; while true; do sleep 0.1; done`)
	checkAdoptedTask(t, "pool3", sb)
}

// checkAdoptedTask: exec, ps, metrics and the credentials of the host
// processes of running task id, which adopted pool sandbox sb; then kill
// (TERM), delete, and the sandbox is gone from the host or back in its
// pool.
func checkAdoptedTask(t *testing.T, id, sb string) {
	t.Helper()
	if out := mustCtr(t, "task", "exec", "--exec-id", "e1", id, "sh", "-c", "echo exec-$((6*7))"); strings.TrimSpace(out) != "exec-42" {
		t.Errorf("exec output %q, want exec-42", out)
	}
	if out := mustCtr(t, "task", "ps", id); len(strings.Split(strings.TrimSpace(out), "\n")) < 2 {
		t.Errorf("task ps lists no process:\n%s", out)
	}
	if out := mustCtr(t, "task", "metrics", id); !strings.Contains(out, "memory.usage_in_bytes") && !strings.Contains(out, "memory.usage") {
		t.Errorf("task metrics without memory usage:\n%s", out)
	}
	checkPoolCredentials(t, taskPid(t, id), sb)
	checkExecWaiter(t, id)
	proc := asProcess(t, id)
	mustCtr(t, "task", "kill", "-s", "TERM", id)
	waitStatus(t, id, "STOPPED")
	// A container's monitor killed what was left of it and marked it
	// ended: the shim's `kill --all` after the exit is answered without
	// gvx-sentry. (A task started as a process has no such marker.)
	ended := api.SentryRoot(filepath.Join(harness.State.SentryRoot(id), testNS)).MonitorEnded(id)
	if data, err := os.ReadFile(ended); (err == nil && string(data) == api.MonitorEndedMark) == proc {
		t.Errorf("end marker of %s (process task: %v): %q, %v", id, proc, data, err)
	}
	mustCtr(t, "task", "rm", id)
	// Gone, or (a container in it, pool.reset) reset and back in the pool.
	d := harness.SandboxDir(sb)
	if _, err := os.Stat(string(d)); err == nil {
		if _, err := os.Stat(d.Claimed()); err == nil || proc {
			t.Errorf("pool sandbox %s still on the host, neither destroyed nor back in its pool, after its task was deleted (process task: %v)", sb, proc)
		}
	}
	mustCtr(t, "container", "rm", id)
}

// checkExecWaiter: an exec in running task id (adopted from a pool, so
// its monitor serves execs, or a sandbox's root container, exec'd over its
// control socket) is stood for on the host by gvx-runtime's waiter, not by
// a gvx-sentry of its own, and the waiter holds no privilege from the
// moment it is seen.
func checkExecWaiter(t *testing.T, id string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, _, err := e.ctr(context.Background(), "task", "exec", "--exec-id", "waiter", id, "sleep", "3")
		done <- err
	}()
	if !checkWaiter(t, api.RuntimeWaitCommand, id) {
		t.Errorf("exec in %s: no %s on the host stands for it (did the exec start a gvx-sentry?)", id, api.RuntimeWaitCommand)
	}
	if err := <-done; err != nil {
		t.Errorf("exec sleep 3 in %s: %v", id, err)
	}
}

// checkWaiter waits up to 10 s for the waiter (its subcommand command, in
// argv[1]) of an exec in container id and checks, as soon as it is seen,
// that it holds no privilege (checkDropped); it reports whether it saw
// one.
func checkWaiter(t *testing.T, command, id string) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, c := range procs {
			data, err := os.ReadFile(c)
			args := strings.Split(string(data), "\x00")
			if err == nil && len(args) > 3 && args[1] == command && slices.Contains(args[2:4], id) {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(c)))
				checkDropped(t, command, pid)
				return true
			}
		}
	}
	return false
}

// checkPoolCredentials: the task's init on the host is the monitor, left
// with the sandbox's uid, no capabilities, no_new_privs; every other host
// process of the task (the container's gofer below the monitor, the
// sandbox's Sentry, stubs and gofer) is unprivileged and seccomp-locked.
func checkPoolCredentials(t *testing.T, monitor int, sandbox string) {
	t.Helper()
	checkDropped(t, "monitor", monitor)
	sentry, err := harness.SandboxPid(sandbox)
	if err != nil {
		t.Fatal(err)
	}
	procs := append([]int{sentry}, harness.Descendants(sentry)...)
	procs = append(procs, harness.Descendants(monitor)...)
	for _, pid := range procs {
		p, err := readProc(pid)
		if err != nil {
			continue // exited meanwhile
		}
		if strings.Contains(" "+p.uids+" ", " 0 ") || p.noNewPrivs != "1" || p.seccmp != "2" {
			t.Errorf("process %d (%s) of pool sandbox %s: Uid %s NoNewPrivs %s Seccomp %s, want no uid 0, 1, 2", pid, p.name, sandbox, p.uids, p.noNewPrivs, p.seccmp)
		}
	}
}

// TestPoolFallback: without a ready sandbox (no server, or a task the pool
// cannot serve) the task boots its own sandbox and runs all the same.
func TestPoolFallback(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pool.toml")
	if err := os.WriteFile(cfg, []byte("[pool]\nsize = 1\nsocket = \""+filepath.Join(dir, "absent.sock")+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cleanupTask(t, "poolfb1")
	mustCtr(t, "run", "-d", "--runtime", runtime, "--runtime-config-path", cfg, busybox, "poolfb1", "sleep", "60")
	if sb := adopted("poolfb1"); sb != "" {
		t.Errorf("poolfb1 adopted %s without a pool server", sb)
	}
	if out := mustCtr(t, "task", "exec", "--exec-id", "e1", "poolfb1", "echo", "cold"); strings.TrimSpace(out) != "cold" {
		t.Errorf("exec output %q", out)
	}

	// A task on the host network cannot use a sandbox booted on its own.
	p := startPool(t, 1)
	r, err := e.ctrResult(context.Background(), "run", "--rm", "--net-host", "--runtime", runtime, "--runtime-config-path", p.Config, busybox, "poolfb2", "echo", "hostnet")
	if err != nil || r.code != 0 || strings.TrimSpace(r.stdout) != "hostnet" {
		t.Errorf("host-network task: exit %d stdout %q stderr %q err %v", r.code, r.stdout, r.stderr, err)
	}
	if n := p.Ready(); n != 1 {
		t.Errorf("%d sandboxes ready after a task the pool cannot serve, want the 1 untouched", n)
	}
	if out := gvx(t, "pool", "status", "--config", p.Config); !strings.Contains(out, "1/1 ready") || !strings.Contains(out, "0 handed out") || !strings.Contains(out, "can adopt") {
		t.Errorf("gvx pool status: %q, want 1/1 ready, 0 handed out, can adopt", out)
	}
}

// TestPoolKillShim: kill -9 of an adopted task's shim; containerd's cleanup
// destroys the adopted sandbox, and stopping the pool leaves nothing.
func TestPoolKillShim(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	killShimOfAdopted(t, startPool(t, 1), "poolk1")
}

// TestPoolImageKillShim: the same for a task started as a process in an
// image pool's sandbox (and with an exec running in it).
func TestPoolImageKillShim(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	killShimOfAdopted(t, startImagePool(t, 1), "imgk1")
}

// killShimOfAdopted runs task id in one of p's sandboxes, kills its shim
// with SIGKILL and waits until the sandbox is gone (containerd's cleanup of
// the dead shim destroys it); the leak checker checks the rest.
func killShimOfAdopted(t *testing.T, p *harness.Pool, id string) {
	t.Helper()
	sb := runAdopted(t, p, id, nil, "sleep", "600")
	if asProcess(t, id) {
		startExecDetached(t, id)
	}
	shim := shimPid(t, id)
	if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(string(harness.SandboxDir(sb))); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool sandbox %s survived its task's shim", sb)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startExecDetached starts a long exec in task id through ctr, detached.
func startExecDetached(t *testing.T, id string) {
	t.Helper()
	mustCtr(t, "task", "exec", "-d", "--exec-id", "long", id, "sleep", "600")
}

// TestPoolServerRestart: a pool server killed with SIGKILL leaves its ready
// sandboxes behind; the next one destroys them at start, leaves the
// sandbox a task adopted alone (the task keeps working), and refills.
func TestPoolServerRestart(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	p := startPool(t, 2)
	owned := runAdopted(t, p, "poolr1", nil, "sleep", "600")
	if err := p.WaitReady(context.Background(), 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	stale, _ := filepath.Glob(filepath.Join(string(p.Dir), api.PoolSandboxPrefix+"*"))
	p.Kill()

	q, err := harness.ServePool(context.Background(), e.gvxBin, p.Config, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := q.Stop(); err != nil {
			t.Error(err)
		}
	})
	for _, d := range stale {
		_, err := os.Stat(d)
		if filepath.Base(d) == owned && err != nil {
			t.Errorf("the adopted sandbox %s was removed by the new server: %v", owned, err)
		}
		if filepath.Base(d) != owned && err == nil {
			t.Errorf("stale ready sandbox %s survived the new server's start", d)
		}
	}
	if !strings.Contains(q.Log(), "removed stale sandbox") {
		t.Errorf("new server did not report removing stale sandboxes:\n%s", q.Log())
	}
	if out := mustCtr(t, "task", "exec", "--exec-id", "e1", "poolr1", "echo", "still-here"); strings.TrimSpace(out) != "still-here" {
		t.Errorf("exec in the adopted sandbox after the restart: %q", out)
	}
}

// TestPoolTTY: a tty task in an adopted pool sandbox has its terminal (the
// console socket reaches gVisor through the sub-container create) and its
// console size.
func TestPoolTTY(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	p := startPool(t, 1)
	checkTTY(t, "pooltty", "--runtime-config-path", p.Config)
	// The pool refills what the task adopted.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Log(), "2 booted") {
		if time.Now().After(deadline) {
			t.Fatalf("the tty task did not adopt the pool's sandbox (no refill); pool log:\n%s", p.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPoolKillSandbox: kill -9 of an adopted sandbox's Sentry mid-run is
// the task's exit (137, through its monitor), and deleting the task leaves
// nothing behind.
func TestPoolKillSandbox(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	p := startPool(t, 1)
	sb := runAdopted(t, p, "poolks1", nil, "sleep", "600")
	sentry, err := harness.SandboxPid(sb)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(sentry, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, "poolks1", "STOPPED")
	r, err := e.ctrResult(context.Background(), "task", "rm", "poolks1")
	if err != nil || r.code != 0 {
		t.Fatalf("task rm: %v %d %s", err, r.code, r.stderr)
	}
	mustCtr(t, "container", "rm", "poolks1")
	if _, err := os.Stat(string(harness.SandboxDir(sb))); !os.IsNotExist(err) {
		t.Errorf("pool sandbox %s still on the host after its task was deleted (stat: %v)", sb, err)
	}
}

// TestPoolVolume: a task with an ext4lite volume (an agent's workspace,
// cloned per episode) adopts a pool sandbox; the volume is mounted inside
// that sandbox only, the task's writes land in the image, and the task's
// delete leaves the image clean and unleased.
func TestPoolVolume(t *testing.T) {
	requireEnv(t)
	dir := volumeDir(t)
	checkNoLeaks(t)
	p := startPool(t, 1)
	img := filepath.Join(dir, "ws.ext4")
	gvx(t, "volume", "create", "--size", "32M", img)
	runAdopted(t, p, "poolvol", volMount(img, "/work"), "sh", "-c", "echo from-pool > /work/f && sync && sleep 600")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if out, _, err := e.ctr(context.Background(), "task", "exec", "--exec-id", "c1", "poolvol", "cat", "/work/f"); err == nil && strings.TrimSpace(out) == "from-pool" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the task's write never showed in its volume")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, m := range harness.MountsUnder("/") {
		if strings.Contains(m, "ws.ext4") || strings.HasPrefix(m, harness.State.VolumesDir()) {
			t.Errorf("volume mounted on the host at %s", m)
		}
	}
	mustCtr(t, "task", "kill", "-s", "KILL", "poolvol")
	waitStatus(t, "poolvol", "STOPPED")
	mustCtr(t, "task", "rm", "poolvol")
	mustCtr(t, "container", "rm", "poolvol")
	if got, ok := readInImage(t, img, "/f"); !ok || strings.TrimSpace(got) != "from-pool" {
		t.Errorf("file written in the pool sandbox: %q (exists %v)", got, ok)
	}
	fsckClean(t, img)
	gvx(t, "volume", "check", img)
}

// TestPoolMetrics: an adopted task's metrics are its sandbox's (the pool
// sandbox's cgroup, with the config's memory limit), not those of the host
// cgroup its monitor started in.
func TestPoolMetrics(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	p := startPoolWith(t, 1, "[resources]\nmemory_bytes = 268435456\n")
	runAdopted(t, p, "poolmet", nil, "sleep", "600")
	out := mustCtr(t, "task", "metrics", "poolmet")
	if !strings.Contains(out, "268435456") {
		t.Errorf("task metrics without the pool sandbox's 256 MiB memory limit:\n%s", out)
	}
}

// TestPoolOOM: an adopted task that exhausts its sandbox's memory limit
// gets a TaskOOM event (from the pool sandbox's cgroup) and dies.
func TestPoolOOM(t *testing.T) {
	c, ctx, img := clientEnv(t)
	checkNoLeaks(t)
	p := startPoolWith(t, 1, "[resources]\nmemory_bytes = 134217728\n")
	evctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, errs := c.Subscribe(evctx, `topic=="/tasks/oom"`)
	cont := newContainerWith(t, c, ctx, img, "pooloom", &runtimeoptions.Options{ConfigPath: p.Config},
		coci.WithProcessArgs("sh", "-c", "x=a; while true; do x=$x$x$x$x; done"))
	task, exit := startTask(t, ctx, cont, cio.NullIO)
	if harness.Adopted(testNS, "pooloom") == "" {
		t.Fatalf("pooloom did not adopt a pool sandbox; pool log:\n%s", p.Log())
	}
	select {
	case env := <-ch:
		if v, err := typeurl.UnmarshalAny(env.Event); err != nil || v.(*apievents.TaskOOM).ContainerID != "pooloom" {
			t.Errorf("OOM event %v (%v), want one for pooloom", v, err)
		}
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(60 * time.Second):
		t.Error("no TaskOOM event within 60 s")
	}
	select {
	case <-exit:
	case <-time.After(30 * time.Second):
		_ = task.Kill(ctx, syscall.SIGKILL)
		<-exit
	}
	if _, err := task.Delete(ctx); err != nil {
		t.Error(err)
	}
}

// startImagePool runs an image pool of size on the test image.
func startImagePool(t *testing.T, size int) *harness.Pool {
	t.Helper()
	return startPoolWith(t, size, fmt.Sprintf("image = %q\ncontainerd = %q\nnamespace = %q\n", busybox, e.Socket(), testNS))
}

// asProcess reports whether task id started as a process in its pool
// sandbox's root container (sentry/exectask's record is in its root).
func asProcess(t *testing.T, id string) bool {
	t.Helper()
	sb := adopted(id)
	if sb == "" {
		t.Fatalf("%s adopted no pool sandbox", id)
	}
	recs, _ := filepath.Glob(harness.SandboxDir(sb).Root().TaskRecord(id))
	return len(recs) == 1
}

// TestPoolImage: a pool booted on the task's image starts the task as a
// process in an adopted sandbox's root container (no container, no rootfs
// mount): output, exit codes, signal deaths, writes private to each task,
// exec, ps, kill, credentials of the host processes, a kill before start,
// a task of another image (a container in the sandbox), and nothing left
// behind — the image's lease included once the pool stops.
func TestPoolImage(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	p := startImagePool(t, 2)
	cfgArgs := []string{"--runtime", runtime, "--runtime-config-path", p.Config}
	run := func(id string, args ...string) result {
		t.Helper()
		r, err := e.ctrResult(context.Background(), append(append([]string{"run", "--rm"}, cfgArgs...), append([]string{busybox, id}, args...)...)...)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := run("img1", "sh", "-c", "echo out; echo err >&2; touch /mine; ls /mine; exit 3")
	if r.code != 3 || strings.TrimSpace(r.stdout) != "out\n/mine" || strings.TrimSpace(r.stderr) != "err" {
		t.Errorf("run: exit %d stdout %q stderr %q, want 3, \"out\\n/mine\", \"err\"", r.code, r.stdout, r.stderr)
	}
	for _, tc := range []struct {
		script string
		want   int
	}{{"test ! -e /mine", 0}, {"kill -9 $$", 137}, {"kill -15 $$", 143}} {
		if r := run("img2", "sh", "-c", tc.script); r.code != tc.want {
			t.Errorf("%q: exit %d, want %d (stderr %q)", tc.script, r.code, tc.want, r.stderr)
		}
	}
	// The spec's user, working directory and environment are the process's.
	r, err := e.ctrResult(context.Background(), append(append([]string{"run", "--rm"}, cfgArgs...),
		"--user", "1000:1001", "--cwd", "/tmp", "--env", "EPISODE=7", busybox, "img2", "sh", "-c", `echo $(id -u) $(id -g) $(pwd) $EPISODE`)...)
	if err != nil || r.code != 0 || strings.TrimSpace(r.stdout) != "1000 1001 /tmp 7" {
		t.Errorf("user/cwd/env: exit %d stdout %q stderr %q (%v), want \"1000 1001 /tmp 7\"", r.code, r.stdout, r.stderr, err)
	}

	if err := p.WaitReady(context.Background(), 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	sb := runAdopted(t, p, "img3", nil, "sh", "-c", `trap "echo got-term; exit 7" TERM; while true; do sleep 0.1; done`)
	if !asProcess(t, "img3") {
		t.Fatalf("img3 runs as a container in pool sandbox %s, want a process in its root container; pool log:\n%s", sb, p.Log())
	}
	checkAdoptedTask(t, "img3", sb)

	// Through the client: the exit status of the TERM trap, and a kill
	// before start.
	c, ctx, img := clientEnv(t)
	opts := &runtimeoptions.Options{ConfigPath: p.Config}
	if err := p.WaitReady(context.Background(), 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	cont := newContainerWith(t, c, ctx, img, "img4", opts, coci.WithProcessArgs("sh", "-c", "echo ran; sleep 1000"))
	task, err := cont.NewTask(ctx, cio.NullIO)
	if err != nil {
		t.Fatal(err)
	}
	if !asProcess(t, "img4") {
		t.Errorf("img4 runs as a container in its pool sandbox, want a process")
	}
	exit, err := task.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Kill(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-exit:
		if st.ExitCode() != 137 {
			t.Errorf("img4 killed before start: exit %d, want 137", st.ExitCode())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("img4 killed before start did not exit")
	}
	if _, err := task.Delete(ctx); err != nil {
		t.Fatal(err)
	}

	// Another image's task in an image pool runs as a container inside an
	// adopted sandbox, all the same.
	if err := p.WaitReady(context.Background(), 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	cleanupTask(t, "img5")
	mustCtr(t, append(append([]string{"run", "-d"}, cfgArgs...), "--rootfs", busyboxRootfs(t), "--env", "PATH=/bin", "img5", "/bin/sh", "-c", "echo other; sleep 1000")...)
	if adopted("img5") == "" || asProcess(t, "img5") {
		t.Errorf("task on a rootfs directory: adopted %q, as a process %v; want a container in a pool sandbox", adopted("img5"), asProcess(t, "img5"))
	}
	if out := mustCtr(t, "task", "exec", "--exec-id", "e1", "img5", "sh", "-c", "test -e /.gvx-pause || echo own-rootfs"); strings.TrimSpace(out) != "own-rootfs" {
		t.Errorf("img5 sees the pool's root container's files: %q", out)
	}
	mustCtr(t, "task", "kill", "-s", "KILL", "img5")
	waitStatus(t, "img5", "STOPPED")
	mustCtr(t, "task", "rm", "img5")
	mustCtr(t, "container", "rm", "img5")

	if err := p.Stop(); err != nil {
		t.Error(err)
	}
	if ls, err := c.LeasesService().List(ctx); err != nil || len(ls) != 0 {
		t.Errorf("leases after the pool stopped: %+v (%v), want none", ls, err)
	}
}

// busyboxRootfs unpacks the test image's layer into a directory the
// sandbox's host uid can reach.
func busyboxRootfs(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gvx-rootfs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "img")
	if err := os.Mkdir(img, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", filepath.Join(e.images, "busybox.tar"), "-C", img).CombinedOutput(); err != nil {
		t.Fatalf("unpack busybox.tar: %v: %s", err, out)
	}
	var manifest []struct{ Layers []string }
	data, err := os.ReadFile(filepath.Join(img, "manifest.json"))
	if err == nil {
		err = json.Unmarshal(data, &manifest)
	}
	if err != nil || len(manifest) != 1 || len(manifest[0].Layers) != 1 {
		t.Fatalf("busybox.tar: want one image of one layer (%v)", err)
	}
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", filepath.Join(img, manifest[0].Layers[0]), "-C", rootfs).CombinedOutput(); err != nil {
		t.Fatalf("unpack the busybox layer: %v: %s", err, out)
	}
	return rootfs
}

// TestPoolImageExec: execs in a task started as a process in an image pool
// sandbox go through its monitor (gvx-runtime's fast exec, whose waiter
// stands for the exec on the host): output, exit codes, a forwarded
// SIGTERM, and a waiter without privileges.
func TestPoolImageExec(t *testing.T) {
	c, ctx, img := clientEnv(t)
	checkNoLeaks(t)
	p := startImagePool(t, 1)
	cont := newContainerWith(t, c, ctx, img, "imgx1", &runtimeoptions.Options{ConfigPath: p.Config}, coci.WithProcessArgs("sleep", "600"))
	checkExecs(t, ctx, cont, api.RuntimeWaitCommand)
}

// TestPoolImageServerRestart: an image pool server killed with SIGKILL
// leaves its image mounted and its lease; the next server of that socket
// takes them over (its own lease first, then the old one's deletion), and
// stopping it leaves no lease and no mount.
func TestPoolImageServerRestart(t *testing.T) {
	c, ctx, _ := clientEnv(t)
	checkNoLeaks(t)
	p := startImagePool(t, 1)
	p.Kill()
	if ls, err := c.LeasesService().List(ctx); err != nil || len(ls) != 1 {
		t.Fatalf("leases of the killed server: %+v (%v), want one", ls, err)
	}
	q, err := harness.ServePool(context.Background(), e.gvxBin, p.Config, 1)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := c.LeasesService().List(ctx)
	if err != nil || len(ls) != 1 {
		t.Errorf("leases with the new server: %+v (%v), want only its own", ls, err)
	}
	if err := q.Stop(); err != nil {
		t.Fatal(err)
	}
	if ls, err := c.LeasesService().List(ctx); err != nil || len(ls) != 0 {
		t.Errorf("leases after the pool stopped: %+v (%v), want none", ls, err)
	}
}

// TestPoolImagePauseResumeUpdate: pause, resume and update of a task
// started as a process in an image pool's sandbox act on its sandbox.
func TestPoolImagePauseResumeUpdate(t *testing.T) {
	c, ctx, img := clientEnv(t)
	checkNoLeaks(t)
	p := startImagePool(t, 1)
	cont := newContainerWith(t, c, ctx, img, "imgpr1", &runtimeoptions.Options{ConfigPath: p.Config}, coci.WithProcessArgs("sleep", "60"))
	checkPauseResumeUpdate(t, ctx, cont)
}

// TestPoolImageStdin: stdin reaches a task started as a process in an image
// pool's sandbox, and CloseIO ends it.
func TestPoolImageStdin(t *testing.T) {
	c, ctx, img := clientEnv(t)
	checkNoLeaks(t)
	p := startImagePool(t, 1)
	checkStdinClose(t, ctx, newContainerWith(t, c, ctx, img, "imgio1", &runtimeoptions.Options{ConfigPath: p.Config},
		coci.WithProcessArgs("sh", "-c", "cat; echo to-stderr >&2")))
}

// TestPoolTaskNeverStarted: a task created and never started, then
// killed (a client gone between its create and its start), exits 137
// and deletes cleanly: on a sandbox of its own, and as a container in a
// warm pool's sandbox with the pool's reset on and off. Before, the pool
// task's delete failed ("destroying container …: not found": the sandbox
// never ran it) and left the task undeletable, its sandbox running.
func TestPoolTaskNeverStarted(t *testing.T) {
	cl, ctx, img := clientEnv(t)
	checkNoLeaks(t)
	resetting := startPool(t, 1)
	plain := startPoolWith(t, 1, "reset = false")
	for _, c := range []struct {
		name string
		pool *harness.Pool
	}{{"own", nil}, {"pool-reset", resetting}, {"pool-noreset", plain}} {
		id := "unstarted-" + c.name
		var opts any
		if c.pool != nil {
			opts = &runtimeoptions.Options{ConfigPath: c.pool.Config}
			waitPoolReady(t, c.pool)
		}
		cont := newContainerWith(t, cl, ctx, img, id, opts, coci.WithProcessArgs("sleep", "600"))
		tk, err := cont.NewTask(ctx, cio.NullIO)
		if err != nil {
			t.Fatal(err)
		}
		if c.pool != nil && adopted(id) == "" {
			t.Fatalf("%s did not adopt a pool sandbox", id)
		}
		exit, err := tk.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.Kill(ctx, syscall.SIGKILL); err != nil {
			t.Fatalf("%s: kill: %v", id, err)
		}
		select {
		case st := <-exit:
			if st.ExitCode() != 137 {
				t.Errorf("%s: exit %d, want 137", id, st.ExitCode())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no exit 30 s after SIGKILL", id)
		}
		if _, err := tk.Delete(ctx); err != nil {
			t.Errorf("%s: delete: %v", id, err)
		}
	}
}

// waitPoolReady waits (a minute at most) until pool p has a sandbox ready.
func waitPoolReady(t *testing.T, p *harness.Pool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for p.Ready() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the pool has no sandbox ready after a minute:\n%s", p.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
