package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
)

// checkpointGuest is the task the checkpoint tests save and restore: its
// state is in its memory (a counter bumped by SIGUSR1), in its files (on
// the in-memory root filesystem and on an ext4lite volume at /work), in a
// pipe to another process and a file offset (written on SIGUSR2), and in a
// TCP connection between two processes inside the sandbox (a line sent on
// each SIGUSR1 to the client).
const checkpointGuest = `
echo 1 > /tmp/before; [ -d /work ] && echo 1 > /work/before
mkfifo /tmp/p; cat /tmp/p > /tmp/pipe.out &
exec 3>/tmp/p
exec 4>/tmp/off; printf 12345 >&4
sleep 100000 | nc -l -p 9000 > /tmp/tcp.out &
sleep 0.3
sh -c 'echo $$ > /tmp/client.pid; trap "echo ping" USR1; while true; do sleep 0.05; done' | nc 127.0.0.1 9000 &
n=0
trap 'n=$((n+1)); echo $n > /tmp/n' USR1
trap 'echo x >&3; printf X >&4' USR2
echo $$ > /tmp/main.pid
while true; do sleep 0.05; done
`

var execSeq atomic.Int64

// inTask runs sh -c script in task id and returns its stdout.
func inTask(t *testing.T, id, script string) string {
	t.Helper()
	r, err := e.ctrResult(context.Background(), "task", "exec", "--exec-id", fmt.Sprintf("x%d", execSeq.Add(1)), id, "sh", "-c", script)
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 0 {
		t.Fatalf("exec in %s %q: exit %d: %s", id, script, r.code, r.stderr)
	}
	return r.stdout
}

// waitIn waits until script's output in task id is want.
func waitIn(t *testing.T, id, script, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := e.ctrResult(context.Background(), "task", "exec", "--exec-id", fmt.Sprintf("w%d", execSeq.Add(1)), id, "sh", "-c", script)
		if err == nil && r.code == 0 && strings.TrimSpace(r.stdout) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("in %s, %q never gave %q (last: %q %q)", id, script, want, r.stdout, r.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeTask kills and deletes task id and its container.
func removeTask(t *testing.T, id string) {
	t.Helper()
	mustCtr(t, "task", "kill", "-s", "KILL", id)
	waitStatus(t, id, "STOPPED")
	mustCtr(t, "task", "rm", id)
	mustCtr(t, "container", "rm", id)
}

// TestCheckpointRestore: `ctr c checkpoint --task` of a running task with
// an ext4lite volume leaves it running; after the task is gone, `ctr c
// restore --live` brings it back as it was at the checkpoint — files
// written after it gone and deleted ones back (root filesystem and
// volume), the in-memory counter at its value, the pipe and the file
// offset as they were, the TCP connection inside the sandbox still up.
func TestCheckpointRestore(t *testing.T) {
	requireEnv(t)
	img := filepath.Join(volumeDir(t), "ck.ext4")
	gvx(t, "volume", "create", "--size", "64M", img)
	checkNoLeaks(t)
	id, ref := "ckr", "gvx.test/ckr:1"
	cleanupTask(t, id)
	t.Cleanup(func() { _, _ = e.ctrResult(context.Background(), "images", "rm", ref) })
	mustCtr(t, append(append([]string{"run", "-d", "--runtime", runtime}, volMount(img, "/work")...), busybox, id, "sh", "-c", checkpointGuest)...)
	checkpointRoundTrip(t, id, ref)
	removeTask(t, id)
	fsckClean(t, img)
}

// checkpointRoundTrip runs checkpointGuest's round trip on task id, which
// runs it with an ext4lite volume at /work: its state made (a counter of
// 3, a line over its TCP connection), `ctr c checkpoint --task` to ref
// (the task runs on), changes the restore must undo, the task removed,
// `ctr c restore --live`; then the restored task has the files of the
// checkpoint (root filesystem and volume), its counter, file offset,
// pipe and TCP connection as they were. The restored task runs on.
func checkpointRoundTrip(t *testing.T, id, ref string) {
	t.Helper()
	primeGuest(t, id)
	mustCtr(t, "container", "checkpoint", "--task", id, ref)
	if st := taskStatus(t, id); st != "RUNNING" {
		t.Fatalf("after its checkpoint the task is %s, want RUNNING", st)
	}
	// Changes after the checkpoint, which the restore must undo.
	inTask(t, id, "echo 2 > /tmp/after && rm /tmp/before && echo 2 > /work/after && rm /work/before && sync")
	inTask(t, id, "kill -USR1 $(cat /tmp/main.pid); sleep 0.2; kill -USR1 $(cat /tmp/main.pid); kill -USR2 $(cat /tmp/main.pid)")
	waitIn(t, id, "cat /tmp/n", "5")
	waitIn(t, id, "cat /tmp/off", "12345X")
	removeTask(t, id)

	mustCtr(t, "container", "restore", "--live", id, ref)
	if st := taskStatus(t, id); st != "RUNNING" {
		t.Fatalf("restored task is %s, want RUNNING", st)
	}
	// containerd's extraction of the image for the restore goes once the
	// task runs (containerd leaves it; the shim removes it).
	if copies := harness.RestoreCopies(); len(copies) > 0 {
		t.Errorf("the restored task runs and containerd's copies of the checkpoint are still there: %v", copies)
	}
	if got := inTask(t, id, "ls /tmp/before /tmp/after /work/before /work/after 2>&1; true"); !strings.Contains(got, "/tmp/before") || !strings.Contains(got, "/work/before") ||
		strings.Contains(got, "/tmp/after\n") || !strings.Contains(got, "/tmp/after: No such file") || !strings.Contains(got, "/work/after: No such file") {
		t.Errorf("files after the restore:\n%s\nwant before (rootfs and volume) back and after gone", got)
	}
	inTask(t, id, "kill -USR1 $(cat /tmp/main.pid)")
	waitIn(t, id, "cat /tmp/n", "4") // 3 at the checkpoint, one more since
	inTask(t, id, "kill -USR2 $(cat /tmp/main.pid)")
	waitIn(t, id, "cat /tmp/off", "12345X") // the offset was 5 again
	waitIn(t, id, "cat /tmp/pipe.out", "x") // the pipe still reaches cat
	inTask(t, id, "kill -USR1 $(cat /tmp/client.pid)")
	waitIn(t, id, "cat /tmp/tcp.out | wc -l", "2") // the connection is still up
}

// TestCheckpointFork: one checkpoint restored into two new containers
// gives two sandboxes that diverge: a write in one is invisible in the
// other and in the original.
func TestCheckpointFork(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	ref := "gvx.test/ckf:1"
	t.Cleanup(func() { _, _ = e.ctrResult(context.Background(), "images", "rm", ref) })
	for _, id := range []string{"ckf", "ckf-a", "ckf-b"} {
		cleanupTask(t, id)
	}
	mustCtr(t, "run", "-d", "--runtime", runtime, busybox, "ckf", "sh", "-c", "echo base > /tmp/x; while true; do sleep 0.1; done")
	waitIn(t, "ckf", "cat /tmp/x", "base")
	mustCtr(t, "container", "checkpoint", "--task", "ckf", ref)
	for _, id := range []string{"ckf-a", "ckf-b"} {
		mustCtr(t, "container", "restore", "--live", id, ref)
	}
	inTask(t, "ckf-a", "echo a > /tmp/x")
	inTask(t, "ckf-b", "echo b > /tmp/x")
	for id, want := range map[string]string{"ckf": "base", "ckf-a": "a", "ckf-b": "b"} {
		if got := strings.TrimSpace(inTask(t, id, "cat /tmp/x")); got != want {
			t.Errorf("%s sees %q, want %q", id, got, want)
		}
	}
	for _, id := range []string{"ckf", "ckf-a", "ckf-b"} {
		removeTask(t, id)
	}
}

// TestCheckpointNAT: `ctr c checkpoint --task` of a task on gvx's NAT
// (network = "nat") that publishes a host port; after the task is gone,
// `ctr c restore --live` brings it back on a new NAT: its in-memory
// counter as at the checkpoint, eth0 10.0.2.15, the host's server reached
// through 10.0.2.2 under the same policy, and the published port bound
// again and answered by the guest's server. A restore while the original
// still holds the port fails naming it, and leaves nothing behind.
func TestCheckpointNAT(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	ctx := context.Background()
	srv := startNATHTTP(t, "nat-restored")
	hostPort := freePort(t)
	id, ref := "cknat", "gvx.test/cknat:1"
	cleanupTask(t, id)
	cleanupTask(t, id+"-2")
	t.Cleanup(func() { _, _ = e.ctrResult(context.Background(), "images", "rm", ref) })
	defer logNATOnFailure(t, id)()
	nat := natAnnotations(t, api.NAT{DNS: []string{"127.0.0.1:9"}, Ports: []string{fmt.Sprintf("%d:8080", hostPort)},
		Egress: &api.Egress{Allow: []string{fmt.Sprintf("10.0.2.2:%d", srv.port)}}})
	guest := `n=0; trap 'n=$((n+1)); echo $n > /tmp/n' USR1; echo 0 > /tmp/n
mkdir -p /www; echo published > /www/index.html; httpd -p 8080 -h /www
while true; do sleep 0.05; done`
	mustCtr(t, append(append([]string{"run", "-d", "--runtime", runtime}, nat...), busybox, id, "sh", "-c", guest)...)
	waitIn(t, id, "cat /tmp/n", "0")
	get := fmt.Sprintf("wget -q -O - http://10.0.2.2:%d/", srv.port)
	hostGet := func(want string) {
		t.Helper()
		out, err := httpGetRetry(ctx, fmt.Sprintf("http://127.0.0.1:%d/", hostPort), 10*time.Second)
		if err != nil || strings.TrimSpace(out) != want {
			t.Fatalf("the published port 127.0.0.1:%d: %q, %v; want %q", hostPort, out, err, want)
		}
	}
	hostGet("published")
	inTask(t, id, "kill -USR1 1")
	waitIn(t, id, "cat /tmp/n", "1")
	mustCtr(t, "container", "checkpoint", "--task", id, ref)
	if st := taskStatus(t, id); st != "RUNNING" {
		t.Fatalf("after its checkpoint the task is %s, want RUNNING", st)
	}
	// The original holds the port: a second restore of the checkpoint
	// cannot publish it.
	r, err := e.ctrResult(ctx, "container", "restore", "--live", id+"-2", ref)
	if err != nil {
		t.Fatal(err)
	}
	if r.code == 0 || !strings.Contains(r.stderr, strconv.Itoa(hostPort)) {
		t.Errorf("a restore while the port is held: exit %d, %q; want it refused naming port %d", r.code, r.stderr, hostPort)
	}
	_, _ = e.ctrResult(ctx, "container", "rm", id+"-2")
	inTask(t, id, "kill -USR1 1")
	waitIn(t, id, "cat /tmp/n", "2")
	removeTask(t, id)

	mustCtr(t, "container", "restore", "--live", id, ref)
	if st := taskStatus(t, id); st != "RUNNING" {
		t.Fatalf("restored task is %s, want RUNNING", st)
	}
	inTask(t, id, "kill -USR1 1")
	waitIn(t, id, "cat /tmp/n", "2") // 1 at the checkpoint, one more since
	if got := inTask(t, id, "ip -4 -o addr show eth0"); !strings.Contains(got, "10.0.2.15/24") {
		t.Errorf("restored eth0: %q", got)
	}
	if got := strings.TrimSpace(inTask(t, id, get)); got != "nat-restored" {
		t.Errorf("restored task through 10.0.2.2: %q", got)
	}
	r, err = e.ctrResult(ctx, "task", "exec", "--exec-id", "denied", id, "wget", "-q", "-O", "-", "http://10.0.2.2:1/")
	if err != nil {
		t.Fatal(err)
	}
	if r.code == 0 {
		t.Errorf("the restored NAT let a port its policy does not allow through")
	}
	hostGet("published")
	// The NAT writes its counters within 20 ms of a change.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s := natStats(t, id)
		if s.Allowed >= 1 && s.Published >= 1 && s.Refused >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the restored NAT's counters: %+v, want a flow allowed, one published and one refused", s)
			break
		}
	}
	removeTask(t, id)
}

// TestCheckpointRefused: what gvx cannot checkpoint is refused with an
// error naming why, and the task keeps running; a stopped task cannot be
// checkpointed.
func TestCheckpointRefused(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	ctx := context.Background()
	// A network namespace the task joins by path: on network "none" gvx
	// does not run gVisor's netstack on it (it may hold interfaces).
	const netns = "gvxtest-ckdock"
	if out, err := osexec.Command("ip", "netns", "add", netns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", netns, err, out)
	}
	t.Cleanup(func() { _ = osexec.Command("ip", "netns", "delete", netns).Run() })
	for _, tc := range []struct {
		id, want string
		opts     []string
	}{
		{"ckhost", "host network", []string{"--net-host"}},
		// Docker mode whose dockerd socket is a host socket of the
		// guest's (gVisor forwards no port on its network "none").
		{"ckdocknone", "published as a host socket", []string{"--annotation", api.AnnotationDocker + "=true", "--annotation", api.AnnotationNetwork + "=" + api.NetworkNone,
			"--with-ns", "network:/var/run/netns/" + netns}},
	} {
		cleanupTask(t, tc.id)
		mustCtr(t, append(append([]string{"run", "-d", "--runtime", runtime}, tc.opts...), busybox, tc.id, "sleep", "600")...)
		r, err := e.ctrResult(ctx, "container", "checkpoint", "--task", tc.id, "gvx.test/"+tc.id+":1")
		if err != nil {
			t.Fatal(err)
		}
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("checkpoint of %s: exit %d, %q; want it refused naming %q", tc.id, r.code, r.stderr, tc.want)
		}
		if st := taskStatus(t, tc.id); st != "RUNNING" {
			t.Errorf("%s is %s after the refused checkpoint, want RUNNING", tc.id, st)
		}
		inTask(t, tc.id, "true")
		removeTask(t, tc.id)
	}
	cleanupTask(t, "ckstop")
	mustCtr(t, "run", "-d", "--runtime", runtime, busybox, "ckstop", "true")
	waitStatus(t, "ckstop", "STOPPED")
	r, err := e.ctrResult(ctx, "container", "checkpoint", "--task", "ckstop", "gvx.test/ckstop:1")
	if err != nil {
		t.Fatal(err)
	}
	if r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), "stopped") {
		t.Errorf("checkpoint of a stopped task: exit %d, %q; want it refused", r.code, r.stderr)
	}
	mustCtr(t, "task", "rm", "ckstop")
	mustCtr(t, "container", "rm", "ckstop")

	// A TCP server in a network namespace of the guest's own making, in a
	// plain task (no gvx-relay in its guest): the save itself refuses
	// (gvx-sentry's save guard, sentry/compat/saveguard.go), since its
	// restore would never finish; the task runs on and, its stacks
	// thawed after the failed save, the server answers.
	cleanupTask(t, "ckinner")
	mustCtr(t, "run", "-d", "--runtime", runtime, "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_NET_ADMIN", busybox, "ckinner",
		"unshare", "-n", "sh", "-c", "ip link set lo up; while true; do echo hi-inner | nc -l -p 8080; done")
	inner := "nsenter -t $(pidof nc) -n nc -w 3 127.0.0.1 8080 </dev/null"
	answers := func(when string) {
		t.Helper()
		printsWithin(t, "the inner namespace's server "+when, "hi-inner", func() string { return inTaskQuiet("ckinner", inner+" 2>&1") })
	}
	answers("before the checkpoint")
	r, err = e.ctrResult(ctx, "container", "checkpoint", "--task", "ckinner", "gvx.test/ckinner:1")
	if err != nil {
		t.Fatal(err)
	}
	if r.code == 0 || !strings.Contains(r.stderr, "TCP sockets in inner containers' own network namespaces") || strings.Contains(r.stderr, "goroutine") {
		t.Errorf("checkpoint of a task with a TCP server in a network namespace of its own: exit %d, %q; want it refused naming the sockets, without gVisor's trace", r.code, r.stderr)
	}
	if st := taskStatus(t, "ckinner"); st != "RUNNING" {
		t.Errorf("ckinner is %s after the refused checkpoint, want RUNNING", st)
	}
	answers("after the refused checkpoint")
	removeTask(t, "ckinner")
}

// TestCheckpointOtherSentry: a checkpoint restored by a gvx-sentry of
// another build (another gVisor, or another Go: gVisor's state layout)
// is refused with an error naming both builds and the way out, before
// any guest runs, and leaves nothing behind; the same checkpoint still
// restores on the build that made it.
func TestCheckpointOtherSentry(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	bin := t.TempDir()
	sentry := filepath.Join(bin, api.SentryBinary)
	if err := os.Symlink(filepath.Join(e.Bins.GVX, api.HookBinary), filepath.Join(bin, api.HookBinary)); err != nil {
		t.Fatal(err)
	}
	const other = "gvx-test-other-build"
	cmd := osexec.Command("go", "build", "-ldflags=-X gvisor.dev/gvisor/runsc/version.version="+other, "-o", filepath.Join(bin, "other"), "./cmd/gvx-sentry")
	cmd.Dir = "../sentry"
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build another gvx-sentry: %v\n%s", err, out)
	}
	use := func(target string) {
		t.Helper()
		os.Remove(sentry)
		if err := os.Symlink(target, sentry); err != nil {
			t.Fatal(err)
		}
	}
	use(filepath.Join(e.Bins.GVX, api.SentryBinary))
	cfg := filepath.Join(bin, "config.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("sentry = %q\n", sentry)), 0o644); err != nil {
		t.Fatal(err)
	}
	id, ref := "ckver", "gvx.test/ckver:1"
	cleanupTask(t, id)
	t.Cleanup(func() { _, _ = e.ctrResult(context.Background(), "images", "rm", ref) })
	mustCtr(t, "run", "-d", "--runtime", runtime, "--runtime-config-path", cfg, busybox, id, "sh", "-c", "echo saved > /tmp/mark; exec sleep 100000")
	waitIn(t, id, "cat /tmp/mark", "saved")
	mustCtr(t, "container", "checkpoint", "--task", id, ref)
	removeTask(t, id)

	use(filepath.Join(bin, "other"))
	r, err := e.ctrResult(context.Background(), "container", "restore", "--live", id, ref)
	if err == nil && r.code == 0 {
		t.Fatal("gvx-sentry of another build restored the checkpoint")
	}
	t.Logf("restore on another build: %s", r.stderr)
	for _, want := range []string{other, "another build of gvx-sentry", "take the checkpoint again"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the refusal %q does not name %q", r.stderr, want)
		}
	}
	_, _ = e.ctrResult(context.Background(), "container", "rm", id)

	use(filepath.Join(e.Bins.GVX, api.SentryBinary))
	mustCtr(t, "container", "restore", "--live", id, ref)
	if got := strings.TrimSpace(inTask(t, id, "cat /tmp/mark")); got != "saved" {
		t.Errorf("restored on its own build: /tmp/mark %q", got)
	}
	removeTask(t, id)
}

// TestCheckpointPool: a task that adopted a warm pool's sandbox is
// checkpointed like one with its own. `ctr c checkpoint --task` saves the
// pool sandbox whole (its root container and the task, with the task's
// ext4lite volume); `ctr c restore` brings the task back as it was, in a
// sandbox of its own restored from the image (not one of the pool's),
// which its delete destroys. gvx checkpoint / rollback / fork (the
// rollout engine) do the same, and a checkpoint of the restored task
// works again.
func TestCheckpointPool(t *testing.T) {
	requireEnv(t)
	img := filepath.Join(volumeDir(t), "ckpool.ext4")
	gvx(t, "volume", "create", "--size", "64M", img)
	checkNoLeaks(t)
	p := startPool(t, 1)
	if err := p.WaitReady(context.Background(), 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	id, ref := "ckpool", "gvx.test/ckpool:1"
	t.Cleanup(func() { _, _ = e.ctrResult(context.Background(), "images", "rm", ref) })
	pooled := runAdopted(t, p, id, volMount(img, "/work"), "sh", "-c", checkpointGuest)
	checkpointRoundTrip(t, id, ref)
	own := restoredSandbox(t, id)
	if own == pooled {
		t.Errorf("the restored task runs in pool sandbox %s, want one of its own", pooled)
	}
	if out := mustCtr(t, "task", "ps", id); len(strings.Split(strings.TrimSpace(out), "\n")) < 2 {
		t.Errorf("task ps of the restored task lists no process:\n%s", out)
	}
	// The restored task (in its own sandbox of a pool's shape) is
	// checkpointed again, by the rollout engine: rolled back in place
	// and forked.
	cli, flags := rolloutCLI(t)
	ck := strings.TrimSpace(cli("checkpoint", id))
	inTask(t, id, "echo 3 > /work/after3; echo 3 > /tmp/after3")
	cli("rollback", id, ck)
	waitIn(t, id, "cat /tmp/n", "4")
	waitIn(t, id, "ls /tmp/after3 /work/after3 2>/dev/null | wc -l", "0")
	forks := strings.Fields(cli("fork", ck, "2"))
	if len(forks) != 2 {
		t.Fatalf("gvx fork printed %q, want two ids", forks)
	}
	for _, f := range forks {
		cleanupTask(t, f)
		waitIn(t, f, "cat /tmp/n", "4")
	}
	inTask(t, forks[0], "echo f0 > /tmp/mine")
	waitIn(t, forks[1], "cat /tmp/mine 2>/dev/null || echo none", "none")
	for _, f := range append(forks, id) {
		removeTask(t, f)
	}
	cli("checkpoints", "rm", ck)
	if _, err := os.Stat(harness.State.SentryRoot(id)); err == nil {
		t.Errorf("the sentry directory of %s (its restored sandbox %s) is still there after its delete", id, own)
	}
	fsckClean(t, img)

	// Through the rollout engine from the pool: a fresh pool task.
	if err := p.WaitReady(context.Background(), 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	runAdopted(t, p, "ckpool2", nil, "sh", "-c", "echo 1 > /tmp/v; while true; do sleep 0.1; done")
	waitIn(t, "ckpool2", "cat /tmp/v", "1")
	ck2 := strings.TrimSpace(cli("checkpoint", "ckpool2"))
	inTask(t, "ckpool2", "echo 2 > /tmp/v")
	cli("rollback", "ckpool2", ck2)
	waitIn(t, "ckpool2", "cat /tmp/v", "1")
	restoredSandbox(t, "ckpool2")

	// A damaged image: a state file cut short is refused before the
	// in-place rollback deletes the task, which runs on; one damaged
	// inside (the same size) fails in gVisor's restore, after the delete,
	// so the container is left without a task — and the failed restore
	// leaves nothing on the host (checkNoLeaks: its sandbox and the
	// task's sentry directory gone).
	ck3 := strings.TrimSpace(cli("checkpoint", "ckpool2"))
	state := filepath.Join(flags[len(flags)-1], "handles", ck3, "image", api.CheckpointStateFile)
	saved, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	inTask(t, "ckpool2", "echo 3 > /tmp/v")
	rollback := func() (int, string) {
		t.Helper()
		r, err := e.run(context.Background(), "", filepath.Join(e.gvxBin, "gvx"), append([]string{"rollback"}, append(flags, "ckpool2", ck3)...)...)
		if err != nil {
			t.Fatal(err)
		}
		return r.code, strings.TrimSpace(r.stderr)
	}
	if err := os.Truncate(state, 64); err != nil {
		t.Fatal(err)
	}
	if code, msg := rollback(); code == 0 || !strings.Contains(msg, "damaged: checkpoint.img is 64 bytes") {
		t.Errorf("rollback to a checkpoint with a state file cut short: exit %d: %s; want the image refused as damaged", code, msg)
	}
	waitIn(t, "ckpool2", "cat /tmp/v", "3")
	if err := os.WriteFile(state, append(make([]byte, 64), saved[64:]...), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, msg := rollback(); code == 0 || !strings.Contains(msg, "restore") {
		t.Errorf("rollback to a checkpoint with a damaged state file: exit %d: %s; want the restore's error", code, msg)
	} else {
		t.Logf("rollback to a damaged checkpoint: %s", msg)
	}
	if _, err := os.Stat(harness.State.SentryRoot("ckpool2")); err == nil {
		t.Errorf("the failed restore of ckpool2 left its sentry directory")
	}
	mustCtr(t, "container", "rm", "ckpool2")
	cli("checkpoints", "rm", ck2)
	cli("checkpoints", "rm", ck3)
}

// restoredSandbox returns the id of the sandbox that task id, restored
// from a pool task's checkpoint, runs in: its own, in its sentry
// directory (the shim's restoredSandboxDir), booted by the restore.
func restoredSandbox(t *testing.T, id string) string {
	t.Helper()
	if sb := adopted(id); sb != ".sandbox" {
		t.Fatalf("restored pool task %s runs in sandbox directory %q, want its own (.sandbox)", id, sb)
	}
	rec, err := os.ReadFile(api.SandboxDir(filepath.Join(harness.State.TaskDir(testNS, id), ".sandbox")).Record())
	if err != nil {
		t.Fatal(err)
	}
	var sb struct {
		ID   string          `json:"id"`
		Pool json.RawMessage `json:"pool"`
	}
	if err := json.Unmarshal(rec, &sb); err != nil || !strings.HasPrefix(sb.ID, "gvxroot-") || sb.Pool != nil {
		t.Fatalf("the record of %s's restored sandbox: %s (%v), want a gvxroot-… sandbox of no pool", id, rec, err)
	}
	return sb.ID
}

// TestCheckpointPoolNAT: a task in a NAT pool's sandbox, checkpointed and
// restored: the restored sandbox has a NAT of its own (eth0 10.0.2.15,
// the host server reachable through it again), and a file written before
// the checkpoint is back.
func TestCheckpointPoolNAT(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	srv := startNATHTTP(t, "hello-ck-pool-nat")
	p := startNATPool(t, srv)
	id, ref := "ckpoolnat", "gvx.test/ckpoolnat:1"
	t.Cleanup(func() { _, _ = e.ctrResult(context.Background(), "images", "rm", ref) })
	runAdopted(t, p, id, nil, "sh", "-c", "echo kept > /tmp/kept; while true; do sleep 0.1; done")
	get := fmt.Sprintf("http://10.0.2.2:%d/", srv.port)
	if r := ctrExec(t, id, "get1", "wget", "-q", "-O", "-", get); r.code != 0 || r.stdout != "hello-ck-pool-nat" {
		t.Fatalf("pool task through its NAT: code %d %q %q", r.code, r.stdout, r.stderr)
	}
	mustCtr(t, "container", "checkpoint", "--task", id, ref)
	removeTask(t, id)
	mustCtr(t, "container", "restore", "--live", id, ref)
	restoredSandbox(t, id)
	waitIn(t, id, "cat /tmp/kept", "kept")
	r := ctrExec(t, id, "ip", "sh", "-c", "ip -4 addr show eth0")
	if !strings.Contains(r.stdout, "10.0.2.15/24") {
		t.Errorf("restored pool task's eth0: %q %q", r.stdout, r.stderr)
	}
	if r := ctrExec(t, id, "get2", "wget", "-q", "-O", "-", get); r.code != 0 || r.stdout != "hello-ck-pool-nat" {
		t.Errorf("restored pool task through its NAT: code %d %q %q", r.code, r.stdout, r.stderr)
	}
	if n := srv.conns.Load(); n != 2 {
		t.Errorf("the host server saw %d connections, want 2", n)
	}
	removeTask(t, id)
}
