package integration

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/rollout"
)

// TestRolloutTarget: once a sandbox (no volumes) has a checkpoint, the
// engine keeps a restore target for it — a container whose sandbox booted
// and whose task is created, not started — and a rollback without a spare
// restores into it: the sandbox is then what it was at the checkpoint
// (files, an in-memory counter, a pipe, a file offset, a TCP connection
// inside), its output goes on to the same writer, and a new target is
// made for the next rollback. With NoTargets none is made.
func TestRolloutTarget(t *testing.T) {
	checkNoLeaks(t)
	eng, ctx, _ := rolloutEnvWith(t, rollout.Options{})
	sb := adoptRunning(t, eng, ctx, "tgt", nil, "sh", "-c", checkpointGuest)
	var out syncBuffer
	sb.Attach(&out, &out)
	id := current(sb)
	primeGuest(t, id)
	if got := eng.Target(sb.Lineage()); got != "" {
		t.Errorf("a restore target %s before any checkpoint", got)
	}
	h1, err := eng.Checkpoint(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	var target string
	waitFor(t, "a restore target", func() bool { target = eng.Target(sb.Lineage()); return target != "" })
	c := mustClient(t)
	ct, err := c.LoadContainer(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if labels, err := ct.Labels(ctx); err != nil || labels[rollout.LabelRole] != "target" {
		t.Errorf("target %s's labels: %v %v, want role target", target, labels, err)
	}
	task, err := ct.Task(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := task.Status(ctx); err != nil || st.Status != client.Created {
		t.Errorf("target %s's task: %v %v, want created (booted, not started)", target, st.Status, err)
	}
	inTask(t, id, "echo 2 > /tmp/after && rm /tmp/before")
	inTask(t, id, "kill -USR1 $(cat /tmp/main.pid); sleep 0.2; kill -USR1 $(cat /tmp/main.pid); kill -USR2 $(cat /tmp/main.pid)")
	waitIn(t, id, "cat /tmp/n", "5")
	took, err := eng.Rollback(ctx, sb, h1.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rollback into restore target %s took %s", target, took)
	if current(sb) != target {
		t.Fatalf("the rollback's backing is %s, want the restore target %s", current(sb), target)
	}
	id = current(sb)
	got := inTask(t, id, "ls /tmp/before /tmp/after 2>&1; true")
	if !strings.Contains(got, "/tmp/after: No such file") || strings.Contains(got, "/tmp/before: No such") {
		t.Errorf("files after the rollback:\n%s\nwant before back and after gone", got)
	}
	checkRolledBack(t, id, &out)

	// A checkpoint of the backing restored into the target restores on
	// demand too (RestoreAs always does), and in place: the handle's
	// spec is not a target's.
	h2, err := eng.Checkpoint(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	as, err := eng.RestoreAs(ctx, h2.ID, "tgtas")
	if err != nil {
		t.Fatalf("restore on demand of a checkpoint taken after a rollback into a target: %v", err)
	}
	waitIn(t, current(as), "cat /tmp/n", "4")
	if err := eng.Destroy(ctx, as); err != nil {
		t.Error(err)
	}

	// The next rollback has a new target; the used one is the sandbox's.
	var next string
	waitFor(t, "a new restore target", func() bool { next = eng.Target(sb.Lineage()); return next != "" })
	if next == target {
		t.Fatalf("the used target %s is offered again", target)
	}
	if _, err := eng.Rollback(ctx, sb, h1.ID); err != nil {
		t.Fatal(err)
	}
	if current(sb) != next {
		t.Errorf("the second rollback's backing is %s, want the new target %s", current(sb), next)
	}
	waitIn(t, current(sb), "cat /tmp/n", "3")

	// Forks take the target for one of them.
	waitFor(t, "a third restore target", func() bool { next = eng.Target(sb.Lineage()); return next != "" })
	forks, err := eng.Fork(ctx, h1.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	used := false
	for _, f := range forks {
		if current(f) == next {
			used = true
		}
		waitIn(t, current(f), "cat /tmp/n", "3")
		if err := eng.Destroy(ctx, f); err != nil {
			t.Errorf("destroy fork %s: %v", f.ID, err)
		}
	}
	if !used {
		t.Errorf("no fork restored into the target %s", next)
	}
	// The forks were of the sandbox's lineage; it lives on, and so do
	// its targets.
	waitFor(t, "a restore target after the forks", func() bool { return eng.Target(sb.Lineage()) != "" })
}

// TestRolloutTargetVolume: a sandbox with a read-write ext4lite volume
// has restore targets too: the target boots with the volume's mount point
// empty, and a rollback into it mounts the checkpoint's copy of the
// volume there (its own image, beside the target in the store) before
// gVisor's restore. The sandbox then sees the volume as it was at the
// checkpoint, a process that held a file on it open goes on writing it,
// the original image is untouched, and checkpoints of the restored
// backing hold its volume (a rollback to one restores it, into the next
// target). Nothing is left behind (the leak check: loop devices, mounts).
func TestRolloutTargetVolume(t *testing.T) {
	checkNoLeaks(t)
	eng, ctx, dir := rolloutEnvWith(t, rollout.Options{})
	img := filepath.Join(dir, "tv.ext4")
	gvx(t, "volume", "create", "--size", "64M", img)
	// The guest keeps /vol/log open and appends the counter to it.
	sb := adoptRunning(t, eng, ctx, "tgvol", volMount(img, "/vol"), "sh", "-c",
		"echo before > /vol/state; exec 3>>/vol/log; n=0; while true; do n=$((n+1)); echo $n > /vol/n; echo $n >&3; sleep 0.05; done")
	waitFor(t, "the counter", func() bool { return strings.TrimSpace(inTaskQuiet(current(sb), "cat /vol/n")) != "" })
	h, err := eng.Checkpoint(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		var target string
		waitFor(t, "a restore target", func() bool { target = eng.Target(sb.Lineage()); return target != "" })
		if got := inTask(t, current(sb), "cat /vol/state"); strings.TrimSpace(got) != "before" {
			t.Fatalf("round %d: /vol/state before the change: %q", round, got)
		}
		inTask(t, current(sb), "echo after > /vol/state; touch /vol/new")
		took, err := eng.Rollback(ctx, sb, h.ID)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: rollback into restore target %s took %s", round, target, took)
		if current(sb) != target {
			t.Fatalf("round %d: the rollback's backing is %s, want the restore target %s", round, current(sb), target)
		}
		got := inTask(t, current(sb), "cat /vol/state; ls /vol/new 2>&1; true")
		if !strings.HasPrefix(got, "before\n") || !strings.Contains(got, "No such file") {
			t.Errorf("round %d: the volume after the rollback:\n%s\nwant state \"before\" and no /vol/new", round, got)
		}
		// The restored process writes on through its descriptor.
		n0 := strings.Count(inTask(t, current(sb), "cat /vol/log"), "\n")
		waitFor(t, "the restored guest's writes to /vol/log", func() bool {
			return strings.Count(inTaskQuiet(current(sb), "cat /vol/log"), "\n") > n0+2
		})
	}
	// The rollbacks used copies: the original image, no sandbox's any
	// more, is a clean filesystem (gvx fails the test otherwise).
	gvx(t, "volume", "check", img)
	// A checkpoint of the backing restored into a target holds its
	// volume: changed after it, rolled back to it.
	inTask(t, current(sb), "echo second > /vol/state")
	h2, err := eng.Checkpoint(ctx, sb)
	if err != nil {
		t.Fatalf("checkpoint of a backing restored into a target: %v", err)
	}
	inTask(t, current(sb), "echo third > /vol/state")
	waitFor(t, "a restore target", func() bool { return eng.Target(sb.Lineage()) != "" })
	if _, err := eng.Rollback(ctx, sb, h2.ID); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(inTask(t, current(sb), "cat /vol/state")); got != "second" {
		t.Errorf("after the rollback to the second checkpoint: /vol/state %q, want second", got)
	}
}

// intoTarget adopts sandbox id (ctr run options opts) writing 1 to
// /tmp/state, checkpoints it, writes 2, and rolls it back into the restore
// target the engine made: the sandbox's backing is then the target, and
// its /tmp/state 1 again.
func intoTarget(t *testing.T, eng *rollout.Engine, ctx context.Context, id string, opts []string) *rollout.Sandbox {
	t.Helper()
	sb := adoptRunning(t, eng, ctx, id, opts, "sh", "-c", "echo 1 > /tmp/state; while true; do sleep 0.1; done")
	waitIn(t, current(sb), "cat /tmp/state", "1")
	h, err := eng.Checkpoint(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	var target string
	waitFor(t, "a restore target", func() bool { target = eng.Target(sb.Lineage()); return target != "" })
	inTask(t, current(sb), "echo 2 > /tmp/state")
	if _, err := eng.Rollback(ctx, sb, h.ID); err != nil {
		t.Fatal(err)
	}
	if current(sb) != target {
		t.Fatalf("the rollback's backing is %s, want the restore target %s", current(sb), target)
	}
	return sb
}

// TestRolloutTargetNAT: a NAT sandbox's restore target has its NAT and
// eth0 from its create; a rollback into it gives the sandbox its
// checkpointed files and a working eth0 (10.0.2.15, the policy's allowed
// host port reached through 10.0.2.2, a port it does not allow refused).
func TestRolloutTargetNAT(t *testing.T) {
	checkNoLeaks(t)
	eng, ctx, _ := rolloutEnvWith(t, rollout.Options{})
	srv := startNATHTTP(t, "through the target's nat")
	other := startNATHTTP(t, "not allowed")
	nat := natAnnotations(t, api.NAT{DNS: []string{"127.0.0.1:9"}, Egress: &api.Egress{Allow: []string{fmt.Sprintf("10.0.2.2:%d", srv.port)}}})
	sb := intoTarget(t, eng, ctx, "tgnat", nat)
	id := current(sb)
	if got := strings.TrimSpace(inTask(t, id, "cat /tmp/state")); got != "1" {
		t.Errorf("after the rollback /tmp/state is %q, want 1", got)
	}
	if got := inTask(t, id, "ip -4 -o addr show eth0"); !strings.Contains(got, "10.0.2.15/24") {
		t.Errorf("eth0 after the rollback: %q", got)
	}
	before := srv.conns.Load()
	if got := strings.TrimSpace(inTask(t, id, fmt.Sprintf("wget -q -O - http://10.0.2.2:%d/", srv.port))); got != "through the target's nat" {
		t.Errorf("the allowed host port through 10.0.2.2 after the rollback: %q", got)
	}
	if srv.conns.Load() <= before {
		t.Errorf("the host server saw no connection from the rolled-back sandbox")
	}
	if out := inTaskQuiet(id, fmt.Sprintf("wget -q -T 5 -O - http://10.0.2.2:%d/ && echo reached", other.port)); strings.Contains(out, "reached") {
		t.Errorf("the rolled-back sandbox reached a port its policy does not allow: %q", out)
	}
}

// TestRolloutTargetCtrCheckpoint: a backing restored into a restore target
// (whose container spec carries the target's annotation from its create)
// checkpointed through containerd is restored by `ctr c restore`.
func TestRolloutTargetCtrCheckpoint(t *testing.T) {
	checkNoLeaks(t)
	eng, ctx, _ := rolloutEnvWith(t, rollout.Options{})
	sb := intoTarget(t, eng, ctx, "tgctr", nil)
	ref, id := "gvx.test/tgctr:1", "tgctr-r"
	t.Cleanup(func() { _, _ = e.ctrResult(context.Background(), "images", "rm", ref) })
	cleanupTask(t, id)
	inTask(t, current(sb), "echo 2 > /tmp/state")
	mustCtr(t, "container", "checkpoint", "--task", current(sb), ref)
	mustCtr(t, "container", "restore", "--live", id, ref)
	waitIn(t, id, "cat /tmp/state", "2")
	removeTask(t, id)
}

// TestRolloutTargetsFork: with Options.Targets = 2, a fork of 2 restores
// both forks into restore targets, side by side.
func TestRolloutTargetsFork(t *testing.T) {
	checkNoLeaks(t)
	eng, ctx, _ := rolloutEnvWith(t, rollout.Options{Targets: 2})
	sb := adoptRunning(t, eng, ctx, "tgfork", nil, "sh", "-c", "echo base > /tmp/x; while true; do sleep 1; done")
	waitIn(t, current(sb), "cat /tmp/x", "base")
	h, err := eng.Checkpoint(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two restore targets", func() bool { return eng.Targets(sb.Lineage()) == 2 })
	c := mustClient(t)
	targets, err := c.Containers(ctx, `labels."`+rollout.LabelRole+`"==target,labels."dev.gvx.rollout.lineage"==`+sb.Lineage())
	if err != nil || len(targets) != 2 {
		var names []string
		for _, ct := range targets {
			labels, _ := ct.Labels(ctx)
			names = append(names, ct.ID()+" "+fmt.Sprint(labels))
		}
		t.Fatalf("restore targets in containerd: %d, %v; want 2:\n%s", len(targets), err, strings.Join(names, "\n"))
	}
	forks, err := eng.Fork(ctx, h.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{targets[0].ID(): true, targets[1].ID(): true}
	for _, f := range forks {
		if !ids[current(f)] {
			t.Errorf("fork %s was not restored into a target (%v)", current(f), ids)
		}
		waitIn(t, current(f), "cat /tmp/x", "base")
		if err := eng.Destroy(ctx, f); err != nil {
			t.Errorf("destroy fork %s: %v", f.ID, err)
		}
	}
}

// TestRolloutTargetTimes: rollbacks into restore targets against rollbacks
// restoring on demand (NoTargets), of a plain sandbox and of one with a
// read-write ext4lite volume, five each: a rollback into a target must be
// faster — it skips the sandbox's boot.
func TestRolloutTargetTimes(t *testing.T) {
	checkNoLeaks(t)
	for _, vol := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "volume"}[vol]
		t.Run(name, func(t *testing.T) {
			times := map[bool][]time.Duration{}
			for _, noTargets := range []bool{false, true} {
				eng, ctx, dir := rolloutEnvWith(t, rollout.Options{NoTargets: noTargets})
				id := map[bool]string{false: "tgtime", true: "tgtimeno"}[noTargets]
				var opts []string
				if vol {
					id += "v"
					img := filepath.Join(dir, "v.ext4")
					gvx(t, "volume", "create", "--size", "64M", img)
					opts = volMount(img, "/vol")
				}
				sb := adoptRunning(t, eng, ctx, id, opts, "sh", "-c", "while true; do sleep 1; done")
				h, err := eng.Checkpoint(ctx, sb)
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 5; i++ {
					if !noTargets {
						waitFor(t, "a restore target", func() bool { return eng.Target(sb.Lineage()) != "" })
					} else if got := eng.Target(sb.Lineage()); got != "" {
						t.Fatalf("NoTargets, and a target %s", got)
					}
					took, err := eng.Rollback(ctx, sb, h.ID)
					if err != nil {
						t.Fatal(err)
					}
					times[noTargets] = append(times[noTargets], took)
				}
			}
			tg, od := harness.Percentile(times[false], 50), harness.Percentile(times[true], 50)
			t.Logf("%s sandbox: rollback p50 into a restore target %s, on demand %s (%.2fx)", name, tg, od, float64(tg)/float64(od))
			if tg >= od {
				t.Errorf("rollbacks into restore targets (p50 %s) are not faster than on demand (%s)", tg, od)
			}
		})
	}
}

// TestRestoreTargetRefused: the shim refuses a restore target it cannot
// restore into, a target's start before its checkpoint is named, and the
// checkpoint annotation on a task that is no target — each naming the
// annotation — and the refused task leaves nothing behind.
func TestRestoreTargetRefused(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	c := mustClient(t)
	ctx := namespaces.WithNamespace(context.Background(), testNS)
	img, err := c.GetImage(ctx, busybox)
	if err != nil {
		t.Fatal(err)
	}
	newTask := func(id string, annotations map[string]string, opts ...oci.SpecOpts) (client.Container, client.Task, error) {
		t.Helper()
		cleanupTask(t, id)
		opts = append([]oci.SpecOpts{oci.WithImageConfig(img), oci.WithProcessArgs("sleep", "1000"), oci.WithAnnotations(annotations)}, opts...)
		ct, err := c.NewContainer(ctx, id, client.WithNewSnapshot(id, img), client.WithRuntime(runtime, nil), client.WithNewSpec(opts...))
		if err != nil {
			t.Fatal(err)
		}
		tk, err := ct.NewTask(ctx, cio.NullIO)
		return ct, tk, err
	}
	// Not started before an Update names its checkpoint.
	_, tk, err := newTask("tgnoimg", map[string]string{api.AnnotationRestoreTarget: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Start(ctx); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), api.AnnotationRestoreImage) {
		t.Errorf("start of a target without a checkpoint: %v, want FailedPrecondition naming %s", err, api.AnnotationRestoreImage)
	}
	// A checkpoint that is not one.
	err = tk.Update(ctx, client.WithAnnotations(map[string]string{api.AnnotationRestoreImage: t.TempDir()}))
	if !errdefs.IsInvalidArgument(err) {
		t.Errorf("update naming an empty directory: %v, want InvalidArgument", err)
	}
	// The annotation on a task that is no target.
	_, plain, err := newTask("tgplain", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Update(ctx, client.WithAnnotations(map[string]string{api.AnnotationRestoreImage: "/nonexistent"})); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), api.AnnotationRestoreTarget) {
		t.Errorf("update of a plain task naming a checkpoint: %v, want FailedPrecondition naming %s", err, api.AnnotationRestoreTarget)
	}
	// A target the shim cannot restore into: one with a read-only volume
	// (not copied into a checkpoint, so not a target's to fill in).
	ro := filepath.Join(t.TempDir(), "ro.ext4")
	gvx(t, "volume", "create", "--size", "16M", ro)
	roMount := oci.WithMounts([]specs.Mount{{Type: "ext4", Source: ro, Destination: "/ro", Options: []string{"ro"}}})
	if _, _, err := newTask("tgro", map[string]string{api.AnnotationRestoreTarget: "true"}, roMount); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "read-only volume") {
		t.Errorf("a target with a read-only volume: %v, want FailedPrecondition saying read-only volume", err)
	}
}

// TestGCOrphanedTarget: `gvx gc` leaves a restore target whose engine's
// process runs, and removes one whose engine's process is gone (its owner
// label names a process that exited), with its task.
func TestGCOrphanedTarget(t *testing.T) {
	checkNoLeaks(t)
	eng, ctx, _ := rolloutEnvWith(t, rollout.Options{})
	sb := adoptRunning(t, eng, ctx, "tggc", nil, "sh", "-c", "while true; do sleep 1; done")
	if _, err := eng.Checkpoint(ctx, sb); err != nil {
		t.Fatal(err)
	}
	var target string
	waitFor(t, "a restore target", func() bool { target = eng.Target(sb.Lineage()); return target != "" })
	args := []string{"gc", "--containerd", e.Socket(), "--state-dir", harness.State.Dir, "--min-age", "0", "--grace", "2s"}
	what := "restored " + testNS + "/" + target
	if dry := gvx(t, append(args, "--dry-run")...); hasLine(dry, "would reclaim ", what) {
		t.Fatalf("gvx gc would reclaim the target of a running engine:\n%s", dry)
	}
	// Its engine's process gone: the label names one that exited.
	gone := exec.Command("sleep", "30")
	if err := gone.Start(); err != nil {
		t.Fatal(err)
	}
	id := procfs.Identity(gone.Process.Pid)
	_ = gone.Process.Kill()
	_ = gone.Wait()
	ct, err := mustClient(t).LoadContainer(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ct.SetLabels(ctx, map[string]string{rollout.LabelOwner: id}); err != nil {
		t.Fatal(err)
	}
	out := gvx(t, args...)
	t.Logf("gvx gc:\n%s", out)
	if !hasLine(out, "reclaimed ", what) {
		t.Errorf("gvx gc does not report reclaiming %q", what)
	}
	if _, err := mustClient(t).LoadContainer(ctx, target); !errdefs.IsNotFound(err) {
		t.Errorf("the orphaned target %s after gvx gc: %v, want it gone", target, err)
	}
	if st, err := sb.Task().Status(ctx); err != nil || st.Status != client.Running {
		t.Errorf("the sandbox %s after gvx gc: %v %v, want it running", current(sb), st.Status, err)
	}
}
