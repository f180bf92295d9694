package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/typeurl/v2"

	sdk "github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/metrics"
)

// Quotas (docs/operations.md#quotas): each test runs a sandbox that goes
// over one limit next to a neighbour, and checks that exactly the
// offender is ended or refused, in the way the docs say the guest sees
// it, and that the neighbour still answers with its files intact.

// neighbour is an idle sandbox with a file of its own, checked by its
// returned function.
func neighbour(t *testing.T, c *sdk.Client, id string) func() {
	t.Helper()
	sb := idle(t, c, id)
	ctx := context.Background()
	if res, err := sb.Exec(ctx, []string{"sh", "-c", "echo mine > /mine"}, sdk.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("neighbour's file: %+v, %v", res, err)
	}
	return func() {
		t.Helper()
		res, err := sb.Exec(ctx, []string{"cat", "/mine"}, sdk.ExecOptions{})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "mine\n" {
			t.Errorf("neighbour %s after the offender's quota hit: %q, %+v, %v", id, res.Stdout, res, err)
		}
	}
}

// cgroupValue reads file of the task's cgroup in the test namespace (v2,
// else the v1 hierarchy named by the file's prefix).
func cgroupValue(t *testing.T, id, file string) string {
	t.Helper()
	dirs := []string{filepath.Join("/sys/fs/cgroup", testNS, id)}
	if ctl, _, _ := strings.Cut(file, "."); ctl != "" {
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", ctl, testNS, id))
	}
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, file)); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// TestQuotaMemory: a sandbox over its memory limit gets a reclaim
// threshold below the limit (v2 memory.high, v1 the soft limit, 90 % by
// default), and, past the hard limit, is killed: exit 137, a TaskOOM
// event, and gvx's message on its stderr naming the limit.
func TestQuotaMemory(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	ctx := context.Background()
	check := neighbour(t, c, "qmemnb")
	cc, err := client.New(e.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	evctx, cancel := context.WithCancel(namespaces.WithNamespace(ctx, testNS))
	defer cancel()
	events, errs := cc.Subscribe(evctx, `topic=="/tasks/oom"`)

	var stderr bytes.Buffer
	const limit = 128 << 20
	sb, err := c.New(ctx, sdk.Config{ID: "qmem", Image: busyboxArchive(), Stderr: &stderr,
		Cmd:       []string{"sh", "-c", "read go; dd if=/dev/zero of=/dev/null bs=300M count=1; echo survived"},
		Stdin:     strings.NewReader("go\n"),
		Resources: sdk.Resources{MemoryBytes: limit}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	high := cgroupValue(t, "qmem", "memory.high")
	if high == "" {
		high = cgroupValue(t, "qmem", "memory.soft_limit_in_bytes")
	}
	if n, _ := strconv.Atoi(high); n > limit/100*90 || n < limit/100*90-4096 {
		t.Errorf("reclaim threshold (memory.high / soft limit) %q, want %d (90%% of the limit, page-aligned)", high, limit/100*90)
	}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	code, err := sb.Run(rctx)
	if !errors.Is(err, sdk.ErrOOM) || code != 137 || metrics.Classify(err) != metrics.ClassOOM {
		t.Errorf("offender: exit %d, %v (class %s); want 137, ErrOOM, class oom", code, err, metrics.Classify(err))
	}
	if msg := stderr.String(); !strings.Contains(msg, "out of memory") || !strings.Contains(msg, "128 MiB") || strings.Contains(msg, "survived") {
		t.Errorf("offender's stderr %q: want gvx's out-of-memory message naming 128 MiB", msg)
	}
	select {
	case env := <-events:
		v, err := typeurl.UnmarshalAny(env.Event)
		if ev, ok := v.(*apievents.TaskOOM); err != nil || !ok || ev.ContainerID != "qmem" {
			t.Errorf("OOM event %v (%v), want one for qmem", v, err)
		}
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Error("no TaskOOM event for qmem")
	}
	check()
}

// TestQuotaMemoryExec: an exec that takes its sandbox over the memory
// limit ends with ErrOOM (137), not a bare exit code; an exec that exits
// 137 by itself in a sandbox that runs on is a plain exit.
func TestQuotaMemoryExec(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	ctx := context.Background()
	sb, err := c.New(ctx, sdk.Config{ID: "qmemx", Image: busyboxArchive(), Cmd: []string{"sleep", "600"},
		Resources: sdk.Resources{MemoryBytes: 128 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	r, err := sb.Exec(ctx, []string{"sh", "-c", "kill -9 $$"}, sdk.ExecOptions{})
	if err != nil || r.ExitCode != 137 {
		t.Errorf("an exec killing itself: exit %d, %v; want 137 and no error", r.ExitCode, err)
	}
	r, err = sb.Exec(ctx, []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=300M", "count=1"}, sdk.ExecOptions{Timeout: 30 * time.Second})
	if !errors.Is(err, sdk.ErrOOM) || r.ExitCode != 137 || metrics.Classify(err) != metrics.ClassOOM {
		t.Errorf("an exec over the limit: exit %d, %v (class %s); want 137, ErrOOM, class oom", r.ExitCode, err, metrics.Classify(err))
	}
}

// TestQuotaPids: a fork bomb in a sandbox with a pids limit gets EAGAIN
// inside ("can't fork"), the sandbox lives on and answers exec once the
// bomb's processes end, and the host cgroup's backstop is above the
// guest's limit.
func TestQuotaPids(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	ctx := context.Background()
	check := neighbour(t, c, "qpidsnb")
	sb, err := c.New(ctx, sdk.Config{ID: "qpids", Image: busyboxArchive(), Cmd: []string{"sleep", "100000"},
		Resources: sdk.Resources{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	if got, want := cgroupValue(t, "qpids", "pids.max"), strconv.FormatInt(api.HostPidsLimit(64), 10); got != want {
		t.Errorf("host pids.max %q, want the backstop %s", got, want)
	}
	res, err := sb.Exec(ctx, []string{"sh", "-c", "n=0; for i in $(seq 200); do sleep 3 & n=$((n+1)); done; echo started $n"}, sdk.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fork bomb: exit %d, stdout %q, stderr %.200q", res.ExitCode, res.Stdout, res.Stderr)
	if !bytes.Contains(res.Stderr, []byte("Resource temporarily unavailable")) {
		t.Errorf("fork bomb's stderr %.300q: want EAGAIN (Resource temporarily unavailable)", res.Stderr)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err = sb.Exec(ctx, []string{"echo", "alive"}, sdk.ExecOptions{})
		if err == nil && string(res.Stdout) == "alive\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox does not answer exec after the fork bomb: %+v, %v", res, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if st, err := sb.Status(ctx); err != nil || st != sdk.StatusRunning {
		t.Errorf("offender after the fork bomb: %s, %v; want running", st, err)
	}
	check()
}

// TestQuotaRootfs: writes to a sandbox's root filesystem past its size
// fail with ENOSPC inside; the writes are in a file on the host's disk
// (the overlay's filestore beside the rootfs), not in memory; writes
// under the size work.
func TestQuotaRootfs(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	ctx := context.Background()
	check := neighbour(t, c, "qrootnb")
	sb, err := c.New(ctx, sdk.Config{ID: "qroot", Image: busyboxArchive(), Cmd: []string{"sleep", "100000"},
		Resources: sdk.Resources{DiskBytes: 32 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	res, err := sb.Exec(ctx, []string{"sh", "-c", "dd if=/dev/zero of=/big bs=1M count=64"}, sdk.ExecOptions{})
	if err != nil || res.ExitCode == 0 || !bytes.Contains(res.Stderr, []byte("No space left on device")) {
		t.Errorf("writing 64 MiB past a 32 MiB rootfs: %+v, %v; want ENOSPC", res, err)
	}
	// gVisor's "self" filestore: in the root filesystem's own directory,
	// so the bytes are in the snapshot's upper directory on the host.
	stores, _ := filepath.Glob(filepath.Join(e.dir, "root", "io.containerd.snapshotter.v1.overlayfs", "snapshots", "*", "fs", ".gvisor.filestore.qroot"))
	if len(stores) != 1 {
		t.Errorf("the rootfs's filestore on the host: %v, want one file", stores)
	} else if st, err := os.Stat(stores[0]); err != nil {
		t.Error(err)
	} else if used := st.Sys().(*syscall.Stat_t).Blocks * 512; used < 16<<20 || used > 40<<20 {
		t.Errorf("filestore %s holds %d bytes; want the ~32 MiB written", stores[0], used)
	}
	res, err = sb.Exec(ctx, []string{"sh", "-c", "rm /big && dd if=/dev/zero of=/small bs=1M count=8 2>/dev/null && echo ok"}, sdk.ExecOptions{})
	if err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("writing 8 MiB after freeing the space: %+v, %v", res, err)
	}
	check()
}

// TestQuotaVolume: an ext4lite volume is full at its size (ENOSPC
// inside); the neighbour's volume is untouched.
func TestQuotaVolume(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	ctx := context.Background()
	dir := t.TempDir()
	mine, theirs := filepath.Join(dir, "mine.ext4"), filepath.Join(dir, "theirs.ext4")
	gvx(t, "volume", "create", "--size", "16M", mine)
	gvx(t, "volume", "create", "--size", "16M", theirs)
	nb, err := c.New(ctx, sdk.Config{ID: "qvolnb", Image: busyboxArchive(), Cmd: []string{"sleep", "100000"},
		Mounts: []sdk.Mount{{Type: sdk.MountVolume, Source: theirs, Target: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close(ctx)
	if res, err := nb.Exec(ctx, []string{"sh", "-c", "echo theirs > /data/f"}, sdk.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("neighbour's volume file: %+v, %v", res, err)
	}
	sb, err := c.New(ctx, sdk.Config{ID: "qvol", Image: busyboxArchive(), Cmd: []string{"sleep", "100000"},
		Mounts: []sdk.Mount{{Type: sdk.MountVolume, Source: mine, Target: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	res, err := sb.Exec(ctx, []string{"sh", "-c", "dd if=/dev/zero of=/data/big bs=1M count=32"}, sdk.ExecOptions{})
	if err != nil || res.ExitCode == 0 || !bytes.Contains(res.Stderr, []byte("No space left on device")) {
		t.Errorf("writing 32 MiB to a 16 MiB volume: %+v, %v; want ENOSPC", res, err)
	}
	if res, err := sb.Exec(ctx, []string{"echo", "alive"}, sdk.ExecOptions{}); err != nil || string(res.Stdout) != "alive\n" {
		t.Errorf("offender after its volume filled: %+v, %v", res, err)
	}
	if res, err := nb.Exec(ctx, []string{"sh", "-c", "cat /data/f; dd if=/dev/zero of=/data/g bs=1M count=4 2>/dev/null && echo room"}, sdk.ExecOptions{}); err != nil || string(res.Stdout) != "theirs\nroom\n" {
		t.Errorf("neighbour's volume: %q, %+v, %v", res.Stdout, res, err)
	}
}

// TestQuotaLifetime: at the end of its lifetime (the SDK's Timeout, with
// a StopGrace) every process of the sandbox gets SIGTERM, which the guest
// can handle (the init's trap writes to stdout and exits 0); one that
// ignores it is killed after the grace (137); both runs say ErrTimeout;
// the container carries the lifetime for the janitor
// (dev.gvx.max-lifetime); the neighbour is not touched.
func TestQuotaLifetime(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	ctx := context.Background()
	check := neighbour(t, c, "qlifenb")
	for _, tc := range []struct {
		id, trap, out string
		code          int
		took          time.Duration // at least
	}{
		{"qlife", "trap 'echo got TERM; exit 0' TERM", "up\ngot TERM\n", 0, time.Second},
		{"qlifekill", "trap '' TERM", "up\n", 137, 2 * time.Second},
	} {
		var out bytes.Buffer
		t0 := time.Now()
		sb, err := c.New(ctx, sdk.Config{ID: tc.id, Image: busyboxArchive(), Stdout: &out,
			Cmd:     []string{"sh", "-c", tc.trap + "; echo up; while :; do sleep 0.1; done"},
			Timeout: time.Second, StopGrace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close(ctx)
		ci, err := c.Containerd().ContainerService().Get(c.Context(ctx), tc.id)
		if err != nil || ci.Labels[api.AnnotationMaxLifetime] != "2s" {
			t.Errorf("%s: label %s = %q (%v), want 2s", tc.id, api.AnnotationMaxLifetime, ci.Labels[api.AnnotationMaxLifetime], err)
		}
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		code, err := sb.Run(rctx)
		cancel()
		took := time.Since(t0)
		if !errors.Is(err, sdk.ErrTimeout) || metrics.Classify(err) != metrics.ClassTimeout || code != tc.code || out.String() != tc.out || took < tc.took {
			t.Errorf("%s past its lifetime: exit %d, %v, stdout %q after %s; want %d, ErrTimeout, %q, at least %s",
				tc.id, code, err, out.String(), took, tc.code, tc.out, tc.took)
		}
	}
	check()
}

// TestQuotaCPU: a busy loop in a sandbox capped at half a core gets
// about half a core (cpu.cfs_quota_us / cpu.max from CPUMillis).
func TestQuotaCPU(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	ctx := context.Background()
	sb, err := c.New(ctx, sdk.Config{ID: "qcpu", Image: busyboxArchive(), Cmd: []string{"sleep", "100000"},
		Resources: sdk.Resources{CPUMillis: 500}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	quota := cgroupValue(t, "qcpu", "cpu.max")
	if quota == "" {
		quota = cgroupValue(t, "qcpu", "cpu.cfs_quota_us")
	}
	if quota != "50000 100000" && quota != "50000" {
		t.Errorf("CPU quota %q, want 50000 per 100000 µs", quota)
	}
	before, err := sb.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if res, err := sb.Exec(ctx, []string{"timeout", "3", "sh", "-c", "while :; do :; done"}, sdk.ExecOptions{}); err != nil {
		t.Fatalf("busy loop: %+v, %v", res, err)
	}
	wall := time.Since(t0)
	after, err := sb.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	share := float64(after.CPUNanos-before.CPUNanos) / float64(wall.Nanoseconds())
	t.Logf("busy loop capped at 0.5 core: %.2f cores over %s", share, wall.Round(time.Millisecond))
	// The cap bounds it from above; the quota's throttling shows it is
	// what held the loop back (on this shared 2-core machine other load
	// may hold it below half a core too).
	if share > 0.6 {
		t.Errorf("busy loop got %.2f cores, want at most ≈ 0.5", share)
	}
	stat := cgroupValue(t, "qcpu", "cpu.stat")
	var throttled int
	for _, l := range strings.Split(stat, "\n") {
		if v, ok := strings.CutPrefix(l, "nr_throttled "); ok {
			throttled, _ = strconv.Atoi(v)
		}
	}
	if throttled == 0 {
		t.Errorf("cpu.stat %q: the busy loop was never throttled by its quota", stat)
	}
}
