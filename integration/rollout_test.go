package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/internal/testfs"
	"github.com/gvxrun/gvx/rollout"
)

// rolloutEnv is a rollout engine whose store is on an XFS filesystem (so
// volume copies are reflinks), closed and emptied at cleanup.
func rolloutEnv(t *testing.T, spares int) (*rollout.Engine, context.Context, string) {
	t.Helper()
	return rolloutEnvWith(t, rollout.Options{Spares: spares})
}

// rolloutEnvWith is rolloutEnv with engine options (StoreDir is set).
func rolloutEnvWith(t *testing.T, o rollout.Options) (*rollout.Engine, context.Context, string) {
	t.Helper()
	requireEnv(t)
	dir := loopFS(t, "xfs")
	c, err := client.New(e.Socket())
	if err != nil {
		t.Fatal(err)
	}
	ctx := namespaces.WithNamespace(context.Background(), testNS)
	o.StoreDir = filepath.Join(dir, "store")
	eng, err := rollout.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := eng.Close(ctx); err != nil {
			t.Errorf("close the engine: %v", err)
		}
		hs, _ := eng.Store().List()
		for _, h := range hs {
			if err := eng.Release(ctx, h.ID); err != nil {
				t.Errorf("release %s: %v", h.ID, err)
			}
		}
		c.Close()
	})
	return eng, ctx, dir
}

// adoptRunning starts task id (ctr run -d with opts and args) and hands it
// to the engine; the sandbox is destroyed at cleanup.
func adoptRunning(t *testing.T, eng *rollout.Engine, ctx context.Context, id string, opts []string, args ...string) *rollout.Sandbox {
	t.Helper()
	cleanupTask(t, id)
	mustCtr(t, append(append(append([]string{"run", "-d", "--runtime", runtime}, opts...), busybox, id), args...)...)
	sb, err := eng.Adopt(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := eng.Destroy(ctx, sb); err != nil {
			t.Errorf("destroy %s: %v", sb.ID, err)
		}
	})
	return sb
}

func current(sb *rollout.Sandbox) string { return sb.Container().ID() }

// primeGuest waits until checkpointGuest runs in task id, counts to 3
// and has its TCP client say ping: the state a checkpoint then holds.
func primeGuest(t *testing.T, id string) {
	t.Helper()
	waitIn(t, id, "cat /tmp/main.pid >/dev/null && cat /tmp/client.pid >/dev/null && echo up", "up")
	for i := 0; i < 3; i++ {
		inTask(t, id, "kill -USR1 $(cat /tmp/main.pid)")
		waitIn(t, id, "cat /tmp/n", fmt.Sprint(i+1))
	}
	inTask(t, id, "kill -USR1 $(cat /tmp/client.pid)")
	waitIn(t, id, "cat /tmp/tcp.out", "ping")
}

// checkRolledBack checks that checkpointGuest in task id goes on from
// primeGuest's state: the counter at 4 after one more signal, the file
// offset and the pipe, the TCP connection inside; and that its output
// reaches out.
func checkRolledBack(t *testing.T, id string, out *syncBuffer) {
	t.Helper()
	inTask(t, id, "kill -USR1 $(cat /tmp/main.pid)")
	waitIn(t, id, "cat /tmp/n", "4")
	inTask(t, id, "kill -USR2 $(cat /tmp/main.pid)")
	waitIn(t, id, "cat /tmp/off", "12345X")
	waitIn(t, id, "cat /tmp/pipe.out", "x")
	inTask(t, id, "kill -USR1 $(cat /tmp/client.pid)")
	waitIn(t, id, "cat /tmp/tcp.out | wc -l", "2")
	inTask(t, id, "echo from-the-rollback > /proc/$(cat /tmp/main.pid)/fd/1")
	waitFor(t, "the rolled-back sandbox's output", func() bool { return strings.Contains(out.String(), "from-the-rollback") })
}

// TestRolloutRollback: a sandbox rolled back to a checkpoint — through a
// hot spare and through a restore on demand — is what it was then: files
// (root filesystem and volume), the in-memory counter, a pipe, a file
// offset, a TCP connection inside; the sandbox keeps its id, its output
// goes on to the same writer, and a checkpoint taken after a rollback is a
// child of the handle rolled back to, and containerd holds the sandbox's
// new backing as the sandbox's (what another process finds) by then —
// also with LazyLabels, whose Rollback does not wait for that.
func TestRolloutRollback(t *testing.T) {
	for _, o := range []rollout.Options{{Spares: 1}, {Spares: 0}, {Spares: 1, LazyLabels: true}} {
		spares := o.Spares
		name := fmt.Sprintf("spares=%d", spares)
		if o.LazyLabels {
			name += "-lazy" // (a comma would split ctr's --mount of the test's directory)
		}
		t.Run(name, func(t *testing.T) {
			checkNoLeaks(t) // after the engine's close (cleanups run last first)
			eng, ctx, dir := rolloutEnvWith(t, o)
			img := filepath.Join(dir, "ws.ext4")
			gvx(t, "volume", "create", "--size", "64M", img)
			sbID := fmt.Sprintf("rb%d", spares)
			if o.LazyLabels {
				sbID += "l"
			}
			sb := adoptRunning(t, eng, ctx, sbID, volMount(img, "/work"), "sh", "-c", checkpointGuest)
			var out syncBuffer
			sb.Attach(&out, &out)
			id := current(sb)
			primeGuest(t, id)
			h1, err := eng.Checkpoint(ctx, sb)
			if err != nil {
				t.Fatal(err)
			}
			inTask(t, id, "echo 2 > /tmp/after && rm /tmp/before && echo 2 > /work/after && rm /work/before && sync")
			inTask(t, id, "kill -USR1 $(cat /tmp/main.pid); sleep 0.2; kill -USR1 $(cat /tmp/main.pid); kill -USR2 $(cat /tmp/main.pid)")
			waitIn(t, id, "cat /tmp/n", "5")
			if spares > 0 {
				waitSpare(t, eng, h1.ID)
			}
			took, err := eng.Rollback(ctx, sb, h1.ID)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("rollback (spares=%d) took %s", spares, took)
			if sb.ID != sbID || sb.Parent() != h1.ID {
				t.Errorf("after the rollback: sandbox %s parent %s; want the same id, parent %s", sb.ID, sb.Parent(), h1.ID)
			}
			id = current(sb)
			got := inTask(t, id, "ls /tmp/before /tmp/after /work/before /work/after 2>&1; true")
			if !strings.Contains(got, "/tmp/after: No such file") || !strings.Contains(got, "/work/after: No such file") ||
				strings.Contains(got, "/tmp/before: No such") || strings.Contains(got, "/work/before: No such") {
				t.Errorf("files after the rollback:\n%s\nwant before (rootfs and volume) back and after gone", got)
			}
			checkRolledBack(t, id, &out)
			h2, err := eng.Checkpoint(ctx, sb)
			if err != nil {
				t.Fatal(err)
			}
			if h2.Parent != h1.ID {
				t.Errorf("checkpoint after the rollback: parent %q, want %s", h2.Parent, h1.ID)
			}
			if ct, err := rollout.FindBacking(ctx, mustClient(t), sb.ID); err != nil || ct.ID() != current(sb) {
				t.Errorf("containerd's backing of %s after the rollback: %v %v, want %s", sb.ID, ct, err, current(sb))
			}
			if _, err := eng.Rollback(ctx, sb, h1.ID); err != nil {
				t.Errorf("a second rollback to the same handle: %v", err)
			}
			waitIn(t, current(sb), "cat /tmp/n", "3")
		})
	}
}

// TestRolloutFork: forks of one handle diverge: each has its own volume
// and root filesystem, and writes in one are invisible in the others and
// in the original.
func TestRolloutFork(t *testing.T) {
	checkNoLeaks(t)
	eng, ctx, dir := rolloutEnv(t, 0)
	img := filepath.Join(dir, "ws.ext4")
	gvx(t, "volume", "create", "--size", "64M", img)
	sb := adoptRunning(t, eng, ctx, "fk", volMount(img, "/work"), "sh", "-c", "echo base > /tmp/x; echo base > /work/x; sync; while true; do sleep 0.1; done")
	waitIn(t, current(sb), "cat /work/x", "base")
	h, err := eng.Checkpoint(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	forks, err := eng.Fork(ctx, h.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forks {
		t.Cleanup(func() {
			if err := eng.Destroy(ctx, f); err != nil {
				t.Errorf("destroy fork %s: %v", f.ID, err)
			}
		})
	}
	names := map[string]string{current(sb): "orig"}
	for i, f := range forks {
		if f.Parent() != h.ID {
			t.Errorf("fork %s: parent %s, want %s", f.ID, f.Parent(), h.ID)
		}
		names[current(f)] = fmt.Sprintf("f%d", i)
		inTask(t, current(f), fmt.Sprintf("echo f%d > /tmp/x; echo f%d > /work/x; sync", i, i))
	}
	inTask(t, current(sb), "echo orig > /tmp/x; echo orig > /work/x; sync")
	for id, want := range names {
		if got := strings.TrimSpace(inTask(t, id, "cat /tmp/x /work/x | tr '\\n' ' '")); got != want+" "+want {
			t.Errorf("%s (%s) sees %q, want %q in both files", id, want, got, want)
		}
	}
}

// TestRolloutRefused: a rollback to a released or a foreign handle, and a
// checkpoint that runs out of disk, fail clearly and leave the sandbox
// running as it was.
func TestRolloutRefused(t *testing.T) {
	checkNoLeaks(t)
	eng, ctx, _ := rolloutEnv(t, 0)
	a := adoptRunning(t, eng, ctx, "bad-a", nil, "sh", "-c", "echo a > /tmp/who; while true; do sleep 0.1; done")
	b := adoptRunning(t, eng, ctx, "bad-b", nil, "sh", "-c", "echo b > /tmp/who; while true; do sleep 0.1; done")
	waitIn(t, current(a), "cat /tmp/who", "a")
	waitIn(t, current(b), "cat /tmp/who", "b")
	ha, err := eng.Checkpoint(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Rollback(ctx, b, ha.ID); !errors.Is(err, rollout.ErrForeignHandle) {
		t.Errorf("rollback of b to a's checkpoint: %v, want ErrForeignHandle", err)
	}
	if err := eng.Release(ctx, ha.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Rollback(ctx, a, ha.ID); !errors.Is(err, rollout.ErrUnknownHandle) {
		t.Errorf("rollback to a released checkpoint: %v, want ErrUnknownHandle", err)
	}
	if _, err := eng.Rollback(ctx, a, "ck-0000"); !errors.Is(err, rollout.ErrUnknownHandle) {
		t.Errorf("rollback to a handle that never was: %v, want ErrUnknownHandle", err)
	}
	for sb, who := range map[*rollout.Sandbox]string{a: "a", b: "b"} {
		if got := strings.TrimSpace(inTask(t, current(sb), "cat /tmp/who")); got != who {
			t.Errorf("%s after the refused rollbacks sees %q", sb.ID, got)
		}
	}

	// A store with no room for the sandbox's memory.
	small := testfs.LoopFS(t, "ext4", "32M")
	full, err := rollout.New(mustClient(t), rollout.Options{StoreDir: filepath.Join(small, "store")})
	if err != nil {
		t.Fatal(err)
	}
	big := adoptRunning(t, full, ctx, "bad-full", nil, "sh", "-c", "dd if=/dev/urandom of=/tmp/fill bs=1M count=64 2>/dev/null; echo filled > /tmp/state; while true; do sleep 0.1; done")
	waitIn(t, current(big), "cat /tmp/state", "filled")
	_, err = full.Checkpoint(ctx, big)
	if err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Errorf("checkpoint into a full store: %v, want an error saying there is no space left", err)
	}
	if hs, _ := full.Store().List(); len(hs) != 0 {
		t.Errorf("the failed checkpoint left handles %v", hs)
	}
	if got := strings.TrimSpace(inTask(t, current(big), "cat /tmp/state")); got != "filled" {
		t.Errorf("after the failed checkpoint the sandbox sees %q", got)
	}
	if err := full.Close(ctx); err != nil {
		t.Error(err)
	}
}

// TestRolloutCycles: many checkpoint/rollback cycles (GVX_ROLLOUT_CYCLES,
// default 1000) leave nothing behind: no process, mount, loop device,
// cgroup, sandbox directory (the leak checker), no checkpoint files, and
// no host memory (shared memory, where gVisor's memory files live).
func TestRolloutCycles(t *testing.T) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("GVX_ROLLOUT_CYCLES")); err == nil {
		n = v
	}
	checkNoLeaks(t)
	// No spares: the next cycle comes too soon for one to be ready, and a
	// restore on demand is then cheaper than one competing with a refill.
	eng, ctx, dir := rolloutEnv(t, 0)
	img := filepath.Join(dir, "ws.ext4")
	gvx(t, "volume", "create", "--size", "64M", img)
	shmemBefore := meminfo(t, "Shmem")
	sb := adoptRunning(t, eng, ctx, "cyc", volMount(img, "/work"), "sh", "-c", "n=0; while true; do n=$((n+1)); echo $n > /work/n; sleep 0.02; done")
	waitFor(t, "the counter", func() bool { return strings.TrimSpace(inTaskQuiet(current(sb), "cat /work/n")) != "" })
	var prev string
	start := time.Now()
	var rollbacks []time.Duration
	for i := 0; i < n; i++ {
		h, err := eng.CheckpointAsync(ctx, sb)
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		took, err := eng.Rollback(ctx, sb, h.ID)
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		rollbacks = append(rollbacks, took)
		if prev != "" {
			if err := eng.Release(ctx, prev); err != nil {
				t.Fatalf("cycle %d: %v", i, err)
			}
		}
		prev = h.ID
		if i%100 == 99 {
			t.Logf("%d cycles in %s", i+1, time.Since(start).Round(time.Second))
		}
	}
	// The counter still counts: two reads, the second higher (a single
	// read can fall between the loop's truncate and its write).
	var after int
	waitFor(t, fmt.Sprintf("the counter after %d cycles", n), func() bool {
		v, err := strconv.Atoi(strings.TrimSpace(inTaskQuiet(current(sb), "cat /work/n")))
		if err != nil {
			return false
		}
		if after == 0 {
			after = v
			return false
		}
		return v > after
	})
	t.Logf("%d cycles in %s; rollback p50 %s", n, time.Since(start).Round(time.Millisecond), harness.Percentile(rollbacks, 50))
	if err := eng.Release(ctx, prev); err != nil {
		t.Fatal(err)
	}
	if err := eng.Destroy(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(ctx); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(eng.Store().Dir(), "*", "*"))
	if len(left) > 0 {
		t.Errorf("the store keeps %v", left)
	}
	if grown := meminfo(t, "Shmem") - shmemBefore; grown > 64<<20 {
		t.Errorf("shared memory grew by %d MiB over %d cycles", grown>>20, n)
	}
}

// waitSpare waits until the engine has a spare of handle id ready.
func waitSpare(t *testing.T, eng *rollout.Engine, id string) {
	t.Helper()
	waitFor(t, "a spare of "+id, func() bool { return eng.Spares(id) > 0 })
}

// waitFor polls cond for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inTaskQuiet runs script in task id and returns its stdout ("" on error).
func inTaskQuiet(id, script string) string {
	r, err := e.ctrResult(context.Background(), "task", "exec", "--exec-id", fmt.Sprintf("q%d", execSeq.Add(1)), id, "sh", "-c", script)
	if err != nil || r.code != 0 {
		return ""
	}
	return r.stdout
}

func mustClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(e.Socket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// meminfo reads a /proc/meminfo field in bytes.
func meminfo(t *testing.T, field string) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field+":" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/meminfo", field)
	return 0
}

// syncBuffer is a bytes.Buffer safe for the IO goroutines writing to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// rolloutCLI returns a runner of gvx's checkpoint commands (`gvx
// checkpoint|rollback|fork|checkpoints …`) on the suite's containerd and
// namespace, with a store on an XFS loop filesystem of the test's, and
// the flags it adds after the command.
func rolloutCLI(t *testing.T) (func(args ...string) string, []string) {
	store := filepath.Join(loopFS(t, "xfs"), "store")
	flags := []string{"--address", e.Socket(), "--namespace", testNS, "--store", store}
	return func(args ...string) string {
		t.Helper()
		return gvx(t, append(append(args[:1:1], flags...), args[1:]...)...)
	}, flags
}

// TestRolloutCLI: gvx checkpoint, rollback (in place: the same container
// id, found by ctr), fork, checkpoints and checkpoints rm on a task ctr
// started.
func TestRolloutCLI(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	cli, flags := rolloutCLI(t)
	cleanupTask(t, "cli")
	mustCtr(t, "run", "-d", "--runtime", runtime, busybox, "cli", "sh", "-c", "echo 1 > /tmp/v; while true; do sleep 0.1; done")
	waitIn(t, "cli", "cat /tmp/v", "1")
	ck := strings.TrimSpace(cli("checkpoint", "cli"))
	if !strings.HasPrefix(ck, "ck-") {
		t.Fatalf("gvx checkpoint printed %q, want a handle", ck)
	}
	inTask(t, "cli", "echo 2 > /tmp/v")
	cli("rollback", "cli", ck)
	if st := taskStatus(t, "cli"); st != "RUNNING" {
		t.Fatalf("after gvx rollback the task is %s", st)
	}
	waitIn(t, "cli", "cat /tmp/v", "1")
	if list := cli("checkpoints"); !strings.Contains(list, ck) || !strings.Contains(list, "cli") {
		t.Errorf("gvx checkpoints:\n%s\nwant %s of cli", list, ck)
	}
	forks := strings.Fields(cli("fork", ck, "2"))
	if len(forks) != 2 {
		t.Fatalf("gvx fork printed %q, want two ids", forks)
	}
	for _, f := range forks {
		cleanupTask(t, f)
		waitIn(t, f, "cat /tmp/v", "1")
	}
	// A rollback to another lineage's checkpoint is refused.
	r, err := e.run(context.Background(), "", filepath.Join(e.gvxBin, "gvx"), append(append([]string{"rollback"}, flags...), forks[0]+"-nope", ck)...)
	if err != nil || r.code == 0 {
		t.Errorf("rollback of a container that does not exist: exit %d, %v", r.code, err)
	}
	for _, f := range append(forks, "cli") {
		removeTask(t, f)
	}
	cli("checkpoints", "rm", ck)
	if list := cli("checkpoints"); strings.Contains(list, ck) {
		t.Errorf("released %s still listed:\n%s", ck, list)
	}
}

// TestRolloutDedupe: a checkpoint taken after its parent costs on the
// store's disk (XFS) what the sandbox wrote in between, not its whole
// memory: 64 MiB of random data in the guest's memory at the first
// checkpoint, 4 MiB more at the second, whose pages file still holds
// all of it (and restores it: the data's digest after a rollback).
func TestRolloutDedupe(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	cli, flags := rolloutCLI(t)
	store := flags[len(flags)-1]
	id := "dedupe"
	cleanupTask(t, id)
	// In the root filesystem's writable layer: the sandbox's memory.
	mustCtr(t, "run", "-d", "--runtime", runtime, busybox, id, "sh", "-c", "head -c 64m /dev/urandom > /big && echo up > /tmp/up; while true; do sleep 0.1; done")
	waitIn(t, id, "cat /tmp/up", "up")
	sum := strings.TrimSpace(inTask(t, id, "md5sum < /big"))
	ck1 := strings.TrimSpace(cli("checkpoint", id))
	inTask(t, id, "head -c 4m /dev/urandom > /small")
	free := func() int64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(store, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bfree) * st.Bsize
	}
	before := free()
	ck2 := strings.TrimSpace(cli("checkpoint", id)) // the CLI's engine waits for its dedupe
	used := before - free()
	pages, err := os.Stat(filepath.Join(store, "handles", ck2, "image", api.CheckpointPagesFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second checkpoint: a pages file of %d MiB, %d MiB of the store's disk", pages.Size()>>20, used>>20)
	// The second checkpoint, by another process, is the first's child
	// (the backing's parent label): a `gvx checkpoints` row is "handle
	// parent lineage sandbox …".
	for _, line := range strings.Split(cli("checkpoints"), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == ck2 && f[1] != ck1 {
			t.Errorf("checkpoint %s's parent is %s, want %s (the sandbox's previous checkpoint, by another gvx process)", ck2, f[1], ck1)
		}
	}
	if pages.Size() < 68<<20 || used > 24<<20 {
		t.Errorf("second checkpoint: pages file %d bytes (want ≥ 68 MiB: all the guest's data), %d bytes of disk used (want what changed, ≈ 4 MiB, not the whole)", pages.Size(), used)
	}
	inTask(t, id, "rm /big")
	cli("rollback", id, ck2)
	if got := strings.TrimSpace(inTask(t, id, "md5sum < /big")); got != sum {
		t.Errorf("after a rollback to the deduplicated checkpoint the data's digest is %q, was %q", got, sum)
	}
	removeTask(t, id)
	cli("checkpoints", "rm", ck1)
	cli("checkpoints", "rm", ck2)
}
