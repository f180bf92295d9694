// Command checkpoint benchmarks gvx's checkpoint, rollback and fork against
// runsc's checkpoint and restore.
//
// Through one private containerd: a busybox sandbox with N MiB of its
// memory dirtied (random data in /dev/shm, 1 GiB large) is checkpointed and rolled back
// by the rollout engine (the Sentry's control socket; a restore on
// demand, into a restore target, or hot spares) and forked 8 ways; the peer is runsc of the same
// gVisor version driven by containerd's runc shim (task checkpoint with
// --leave-running, and a restore into a new container). Then a
// DeltaBox-style trajectory: expansions with rollbacks of an agent doing
// work between steps, reporting the share of wall time spent saving and
// rolling back. The checkpoint store is a tmpfs (uncompressed images in
// memory, as RESEARCH.md's routes suggest), but for the disk a chain of
// checkpoints uses with and without deduplication against their parents
// (a store on XFS).
//
//	go run ./bench/checkpoint -runs 20 -mem 16,256
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/rollout"
)

func main() {
	runs := flag.Int("runs", 20, "timed repetitions of each operation")
	nat := flag.Bool("nat", true, "also time checkpoint and rollback of a sandbox on gvx's userspace NAT (network = \"nat\")")
	mems := flag.String("mem", "16,256", "MiB of dirty guest memory, comma separated")
	steps := flag.Int("steps", 100, "expansions of the trajectory (0: skip it)")
	think := flag.Duration("think", time.Second, "time per step the agent spends waiting for its model")
	flag.Parse()
	if err := run(*runs, *mems, *steps, *think, *nat); err != nil {
		fmt.Fprintf(os.Stderr, "bench/checkpoint: %v\n", err)
		os.Exit(1)
	}
}

// env is the bench's containerd, image and scratch store.
type env struct {
	c     *client.Client
	img   client.Image
	store string // a tmpfs
	runsc string
}

func run(runs int, mems string, steps int, think time.Duration, nat bool) error {
	ctx, stop := harness.Interruptible(namespaces.WithNamespace(context.Background(), "gvxckbench"), "bench")
	defer stop()
	b, err := harness.StartBench(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	bins, c, img := b.Bins, b.Client, b.Busybox
	store, err := os.MkdirTemp("", "gvx-ckbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(store)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8g,mode=0755", "tmpfs", store).CombinedOutput(); err != nil {
		return fmt.Errorf("mount a tmpfs store: %v: %s", err, out)
	}
	defer exec.Command("umount", "-l", store).Run()
	x := &env{c: c, img: img, store: store, runsc: filepath.Join(bins.Runsc, "runsc")}

	fmt.Printf("gvx checkpoint bench: %d runs each, busybox with N MiB of dirty memory in /dev/shm, store on tmpfs, %s\n\n", runs, time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("%-7s %-36s %10s %10s\n", "memory", "operation", "p50", "p95")
	for _, m := range strings.Split(mems, ",") {
		mib, err := strconv.Atoi(strings.TrimSpace(m))
		if err != nil {
			return fmt.Errorf("-mem %q: %w", mems, err)
		}
		if err := x.sizes(ctx, mib, runs, nat); err != nil {
			return fmt.Errorf("%d MiB: %w", mib, err)
		}
		if err := x.dedupeChain(ctx, mib); err != nil {
			return fmt.Errorf("%d MiB, checkpoint chain: %w", mib, err)
		}
	}
	if steps > 0 {
		return x.trajectory(ctx, steps, think)
	}
	return nil
}

// row prints one line of the table.
func row(mib int, what string, d []time.Duration) {
	fmt.Printf("%-7s %-36s %10s %10s\n", fmt.Sprintf("%d MiB", mib), what, ms(harness.Percentile(d, 50)), ms(harness.Percentile(d, 95)))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// guest dirties mib MiB of its memory, then idles: random data in
// /dev/shm (a tmpfs of shmKiB: containerd's default spec caps it at 64
// MiB, where a bigger fill failed silently — until 2026-12-05 the "256
// MiB" rows had 64 MiB). The fill must succeed.
func guest(mib int) []string {
	return []string{"sh", "-c", fmt.Sprintf("dd if=/dev/urandom of=/dev/shm/fill bs=1M count=%d 2>/dev/null && echo ready > /tmp/ready; while true; do sleep 1; done", mib)}
}

// shmKiB is the size of every bench sandbox's /dev/shm.
const shmKiB = 1 << 20

// sizes measures everything at mib MiB (with nat, a NAT sandbox's
// checkpoint and rollbacks too).
func (x *env) sizes(ctx context.Context, mib, runs int, nat bool) error {
	// A restore on demand, into a restore target (the default), a hot
	// spare, a hot spare with lazy labels.
	for _, o := range []rollout.Options{{NoTargets: true}, {}, {Spares: 1}, {Spares: 1, LazyLabels: true}} {
		if err := x.gvx(ctx, mib, runs, o, false); err != nil {
			return err
		}
	}
	for _, spares := range []bool{true, false} {
		if err := x.forkReady(ctx, mib, 3, spares); err != nil {
			return err
		}
	}
	if nat {
		for _, o := range []rollout.Options{{NoTargets: true}, {}, {Spares: 1}} {
			if err := x.gvx(ctx, mib, runs, o, true); err != nil {
				return fmt.Errorf("NAT: %w", err)
			}
		}
	}
	return x.peer(ctx, mib, runs)
}

// engine is a rollout engine with options o and a store of its own in the
// tmpfs.
func (x *env) engine(o rollout.Options) (*rollout.Engine, string, error) {
	dir, err := os.MkdirTemp(x.store, "store-")
	if err != nil {
		return nil, "", err
	}
	o.StoreDir = dir
	e, err := rollout.New(x.c, o)
	return e, dir, err
}

// adopted starts sandbox id (guest(mib); more spec options) and adopts it
// into an engine of its own with options o; done destroys the sandbox,
// closes the engine and removes its store.
func (x *env) adopted(ctx context.Context, id string, mib int, o rollout.Options, more ...oci.SpecOpts) (*rollout.Engine, *rollout.Sandbox, func() error, error) {
	e, dir, err := x.engine(o)
	if err != nil {
		return nil, nil, nil, err
	}
	closeAll := func() error {
		defer os.RemoveAll(dir)
		return e.Close(ctx)
	}
	if err := x.start(ctx, id, guest(mib), nil, "", more...); err != nil {
		return nil, nil, nil, errors.Join(err, closeAll())
	}
	sb, err := e.Adopt(ctx, id)
	if err != nil {
		return nil, nil, nil, errors.Join(err, closeAll())
	}
	return e, sb, func() error {
		_ = e.Destroy(ctx, sb)
		return closeAll()
	}, nil
}

// gvx measures the engine at mib MiB with options o: its rollbacks
// restore on demand (NoTargets, no spares), into a restore target (the
// default: each waits until the target is ready, as an agent's think
// time between steps lets it be), or take a hot spare; with nat, of a
// sandbox on gvx's userspace NAT, each restore a new NAT process giving
// the guest its eth0 again (docs/checkpoint.md), timing checkpoints and
// rollbacks alone.
func (x *env) gvx(ctx context.Context, mib, runs int, o rollout.Options, nat bool) (retErr error) {
	spares, lazy, targets := o.Spares, o.LazyLabels, o.Spares == 0 && !o.NoTargets
	id, what := fmt.Sprintf("ck%d-%d-%v-%v", mib, spares, lazy, targets), "gvx"
	var more []oci.SpecOpts
	if nat {
		id, what = fmt.Sprintf("cknat%d-%d-%v", mib, spares, targets), "gvx NAT"
		more = append(more, oci.WithAnnotations(map[string]string{api.AnnotationNetwork: api.NetworkNAT}))
	}
	e, sb, done, err := x.adopted(ctx, id, mib, o, more...)
	if err != nil {
		return err
	}
	defer func() {
		if err := done(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	var syncT, asyncT, paused, rollbacks []time.Duration
	var firstTarget time.Duration
	var disk int64
	for i := 0; i < runs; i++ {
		t0 := time.Now()
		h, err := e.CheckpointAsync(ctx, sb)
		if err != nil {
			return err
		}
		asyncT = append(asyncT, time.Since(t0))
		if err := e.Wait(ctx, h.ID); err != nil {
			return err
		}
		syncT = append(syncT, time.Since(t0))
		if h, err = e.Store().Get(h.ID); err != nil {
			return err
		}
		paused = append(paused, h.Paused)
		disk = e.Store().Bytes(h.ID)
		if spares > 0 {
			for e.Spares(h.ID) == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
		if targets {
			t1 := time.Now()
			if err := waitTarget(e, sb); err != nil {
				return err
			}
			if i == 0 {
				// The first target is made after the first checkpoint.
				firstTarget = time.Since(t1)
			}
		}
		took, err := e.Rollback(ctx, sb, h.ID)
		if err != nil {
			return err
		}
		rollbacks = append(rollbacks, took)
		if err := e.Release(ctx, h.ID); err != nil {
			return err
		}
	}
	if nat {
		// The guest's network works after the last rollback: eth0 is back.
		if out, err := execOut(ctx, sb.Task(), "ip", "-4", "-o", "addr", "show", "eth0"); err != nil || !strings.Contains(out, api.NATGuest.String()) {
			return fmt.Errorf("after its rollbacks %s has no NAT eth0: %q, %v", id, out, err)
		}
	}
	switch {
	case targets:
		row(mib, what+" rollback (restore target)", rollbacks)
		fmt.Printf("%-7s %-36s %10s (after the checkpoint's save)\n", fmt.Sprintf("%d MiB", mib), what+" restore target ready", ms(firstTarget))
		if nat {
			return nil
		}
		return x.targetMemory(ctx, e, sb, mib)
	case spares == 0:
		row(mib, what+" checkpoint (saved)", syncT)
		row(mib, what+" checkpoint (caller, async)", asyncT)
		row(mib, what+" rollback (restore on demand)", rollbacks)
		if nat {
			return nil
		}
		row(mib, "gvx sandbox paused by a checkpoint", paused)
		fmt.Printf("%-7s %-36s %10.1f MiB\n", fmt.Sprintf("%d MiB", mib), "disk per checkpoint", float64(disk)/(1<<20))
		return x.fork(ctx, e, sb, mib)
	case lazy:
		row(mib, what+" rollback (hot spare, lazy labels)", rollbacks)
		return nil
	}
	row(mib, what+" rollback (hot spare)", rollbacks)
	if nat {
		return nil
	}
	return x.spareMemory(ctx, e, sb, mib)
}

// fork forks 8 sandboxes from a checkpoint of sb, and compares their
// memory with sb's.
func (x *env) fork(ctx context.Context, e *rollout.Engine, sb *rollout.Sandbox, mib int) error {
	h, err := e.Checkpoint(ctx, sb)
	if err != nil {
		return err
	}
	defer e.Release(ctx, h.ID)
	t0 := time.Now()
	forks, err := e.Fork(ctx, h.ID, 8)
	if err != nil {
		return err
	}
	total := time.Since(t0)
	var pss int64
	for _, f := range forks {
		pss += x.pss(ctx, f.Task())
	}
	one := x.pss(ctx, sb.Task())
	for _, f := range forks {
		_ = e.Destroy(ctx, f)
	}
	fmt.Printf("%-7s %-36s %10s %10s\n", fmt.Sprintf("%d MiB", mib), "gvx fork of 8 (each, all at once)", ms(total/8), ms(total))
	fmt.Printf("%-7s %-36s %10.1f MiB (one sandbox %.1f MiB: %.1fx)\n", fmt.Sprintf("%d MiB", mib), "PSS of 8 forks", float64(pss)/(1<<20), float64(one)/(1<<20), float64(pss)/float64(max(one, 1)))
	return nil
}

// forkReady times forks of 8 from a checkpoint whose engine keeps 8
// backings ready, reps times: with spares, 8 hot spares (a configuration:
// Options.Spares = 8) — each fork a spare resumed and labelled as a
// sandbox, no restore, each spare a sandbox's memory, as the forks of a
// restore cost; else 8 restore targets (Options.Targets = 8) — each fork
// a restore into a booted sandbox, the 8 side by side, each target an
// idle sandbox's memory.
func (x *env) forkReady(ctx context.Context, mib, reps int, spares bool) (retErr error) {
	const n = 8
	id, kind, o := fmt.Sprintf("ckfork%d", mib), "hot spares", rollout.Options{Spares: n}
	if !spares {
		id, kind, o = fmt.Sprintf("cktgfork%d", mib), "restore targets", rollout.Options{Targets: n}
	}
	e, sb, done, err := x.adopted(ctx, id, mib, o)
	if err != nil {
		return err
	}
	defer func() {
		if err := done(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	var each []time.Duration
	for i := 0; i < reps; i++ {
		h, err := e.Checkpoint(ctx, sb)
		if err != nil {
			return err
		}
		ready := func() int { return e.Targets(sb.Lineage()) }
		if spares {
			ready = func() int { return e.Spares(h.ID) }
		}
		for deadline := time.Now().Add(3 * time.Minute); ready() < n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				return fmt.Errorf("%d %s for %s not ready after 3 min (%d are)", n, kind, sb.ID, ready())
			}
		}
		t0 := time.Now()
		forks, err := e.Fork(ctx, h.ID, n)
		if err != nil {
			return err
		}
		each = append(each, time.Since(t0)/n)
		for _, f := range forks {
			if err := e.Destroy(ctx, f); err != nil {
				return err
			}
		}
		if err := e.Release(ctx, h.ID); err != nil {
			return err
		}
	}
	row(mib, fmt.Sprintf("gvx fork of %d (each, %d %s)", n, n, kind), each)
	return nil
}

// spareMemory reports what one hot spare of a checkpoint of sb costs.
func (x *env) spareMemory(ctx context.Context, e *rollout.Engine, sb *rollout.Sandbox, mib int) error {
	h, err := e.Checkpoint(ctx, sb)
	if err != nil {
		return err
	}
	defer e.Release(ctx, h.ID)
	for e.Spares(h.ID) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	// The spare is the engine's; find its task among the containers.
	conts, err := x.c.Containers(ctx, "labels.\"dev.gvx.rollout.role\"==spare")
	if err != nil || len(conts) == 0 {
		return fmt.Errorf("no spare container found: %v", err)
	}
	task, err := conts[0].Task(ctx, nil)
	if err != nil {
		return err
	}
	fmt.Printf("%-7s %-36s %10.1f MiB\n", fmt.Sprintf("%d MiB", mib), "PSS of one hot spare (paused)", float64(x.pss(ctx, task))/(1<<20))
	return nil
}

// waitTarget waits until e has a restore target ready for sb.
func waitTarget(e *rollout.Engine, sb *rollout.Sandbox) error {
	for deadline := time.Now().Add(time.Minute); e.Target(sb.Lineage()) == ""; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("no restore target for %s after a minute", sb.ID)
		}
	}
	return nil
}

// targetMemory reports what the restore target e keeps for sb costs: a
// sandbox booted, its container created and not started.
func (x *env) targetMemory(ctx context.Context, e *rollout.Engine, sb *rollout.Sandbox, mib int) error {
	if err := waitTarget(e, sb); err != nil {
		return err
	}
	cont, err := x.c.LoadContainer(ctx, e.Target(sb.Lineage()))
	if err != nil {
		return err
	}
	task, err := cont.Task(ctx, nil)
	if err != nil {
		return err
	}
	uss, pss := x.mem(task)
	fmt.Printf("%-7s %-36s %10.1f MiB (USS %.1f MiB)\n", fmt.Sprintf("%d MiB", mib), "PSS of one restore target (idle)", float64(pss)/(1<<20), float64(uss)/(1<<20))
	return nil
}

// pss is the PSS of a task's sandbox: the shim's process tree.
func (x *env) pss(_ context.Context, task client.Task) int64 {
	_, pss := x.mem(task)
	return pss
}

// mem is the USS and PSS of a task's sandbox: the shim's process tree.
func (x *env) mem(task client.Task) (uss, pss int64) {
	shim := harness.ParentOf(int(task.Pid()))
	for _, pid := range append([]int{shim}, harness.Descendants(shim)...) {
		if u, p, ok := harness.Smaps(pid); ok {
			uss += u
			pss += p
		}
	}
	return uss, pss
}

// peer measures runsc's checkpoint (leave running) and restore through
// containerd's runc shim at mib MiB.
func (x *env) peer(ctx context.Context, mib, runs int) error {
	opts := &options.Options{BinaryName: x.runsc}
	// Ids none of which is a prefix of another: runsc resolves ids by
	// prefix within its root.
	id := fmt.Sprintf("rso%05d", mib)
	if err := x.start(ctx, id, guest(mib), opts, "io.containerd.runc.v2"); err != nil {
		return err
	}
	cont, err := x.c.LoadContainer(ctx, id)
	if err != nil {
		return err
	}
	defer stop(ctx, cont)
	task, err := cont.Task(ctx, nil)
	if err != nil {
		return err
	}
	var cks, restores []time.Duration
	for i := 0; i < runs; i++ {
		dir := filepath.Join(x.store, fmt.Sprintf("runsc-%d-%d", mib, i))
		t0 := time.Now()
		if _, err := task.Checkpoint(ctx, client.WithCheckpointImagePath(dir)); err != nil {
			return fmt.Errorf("runsc checkpoint: %w", err)
		}
		cks = append(cks, time.Since(t0))
		rid := fmt.Sprintf("rsr%05d-%03d", mib, i)
		t1 := time.Now()
		if err := x.restorePeer(ctx, cont, rid, dir, opts); err != nil {
			return err
		}
		restores = append(restores, time.Since(t1))
		os.RemoveAll(dir)
	}
	row(mib, "runsc checkpoint --leave-running", cks)
	row(mib, "runsc restore (new container)", restores)
	return nil
}

// restorePeer restores runsc image dir into a new container rid with
// cont's spec, then removes it.
func (x *env) restorePeer(ctx context.Context, cont client.Container, rid, dir string, opts *options.Options) error {
	spec, err := cont.Spec(ctx)
	if err != nil {
		return err
	}
	spec.Linux.CgroupsPath = filepath.Join(filepath.Dir(spec.Linux.CgroupsPath), rid)
	rc, err := x.c.NewContainer(ctx, rid, client.WithNewSnapshot(rid, x.img), client.WithSpec(spec),
		client.WithRuntime("io.containerd.runc.v2", &options.Options{BinaryName: opts.BinaryName}))
	if err != nil {
		return err
	}
	defer stop(ctx, rc)
	t, err := rc.NewTask(ctx, nullIO, client.WithRestoreImagePath(dir))
	if err != nil {
		return fmt.Errorf("runsc restore: %w", err)
	}
	if err := t.Start(ctx); err != nil {
		return fmt.Errorf("runsc restore: %w", err)
	}
	return nil
}
