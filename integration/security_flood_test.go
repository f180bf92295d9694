package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	coci "github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// procKiB is field (VmRSS, ...) of /proc/pid/status in KiB.
func procKiB(pid int, field string) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			n, _ := strconv.Atoi(strings.Fields(l)[1])
			return n
		}
	}
	return 0
}

func procFds(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

// treeRSS is the RSS (KiB) and count of pid's host descendants.
func treeRSS(pid int) (kib, n int) {
	for _, d := range hostDescendants(pid) {
		kib += procKiB(d, "VmRSS")
		n++
	}
	return
}

// treeKinds counts pid's host descendants by their first two arguments.
func treeKinds(pid int) map[string]int {
	out := map[string]int{}
	for _, d := range hostDescendants(pid) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", d))
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		k := filepath.Base(args[0])
		if len(args) > 1 {
			k += " " + args[1]
		}
		out[k]++
	}
	return out
}

type countWriter struct{ n atomic.Int64 }

func (w *countWriter) Write(b []byte) (int, error) { w.n.Add(int64(len(b))); return len(b), nil }

// TestSecurityExecFlood: a client firing 60 concurrent execs at a task
// whose config allows 24 ([resources] max_execs): 24 run, the rest are
// refused with ResourceExhausted naming the setting, the shim's memory
// and descriptors and the host processes stay bounded by the 24, a canary
// sandbox answers within 3× its idle exec latency, and the cap frees as
// execs are deleted. Then an exec writing 1 GiB: the shim's memory does
// not grow with it (its stdio copies stream).
func TestSecurityExecFlood(t *testing.T) {
	c, ctx, img := clientEnv(t)
	checkNoLeaks(t)
	cn := startCanary(t, "sec-flood-canary")
	idle := execLatency(t, cn.id, 7)
	cfg := filepath.Join(t.TempDir(), "flood.toml")
	if err := os.WriteFile(cfg, []byte("[resources]\nmax_execs = 24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cont := newContainerWith(t, c, ctx, img, "sec-flood", &runtimeoptions.Options{ConfigPath: cfg}, coci.WithProcessArgs("sleep", "3600"))
	task, exit := startTask(t, ctx, cont, cio.NullIO)
	defer func() {
		_ = task.Kill(ctx, 9)
		<-exit
		_, _ = task.Delete(ctx)
	}()
	spec, err := cont.Spec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shim := shimPid(t, "sec-flood")
	rss0, fds0 := procKiB(shim, "VmRSS"), procFds(shim)
	tree0, procs0 := treeRSS(shim)

	const fired = 60
	var mu sync.Mutex
	var started []string
	refused, other := 0, []string{}
	var wg sync.WaitGroup
	for i := 0; i < fired; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p := *spec.Process
			p.Args = []string{"sleep", "30"}
			id := fmt.Sprintf("flood%d", i)
			proc, err := task.Exec(ctx, id, &p, cio.NullIO)
			if err == nil {
				err = proc.Start(ctx)
				if err != nil {
					_, _ = proc.Delete(ctx)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				started = append(started, id)
			case errdefs.IsResourceExhausted(err) && strings.Contains(err.Error(), "max_execs"):
				refused++
			default:
				other = append(other, err.Error())
			}
		}(i)
	}
	wg.Wait()
	if len(other) > 0 {
		t.Errorf("%d execs failed otherwise than ResourceExhausted: %q", len(other), other[0])
	}
	if len(started) != 24 || refused != fired-24 {
		t.Errorf("of %d concurrent execs %d started and %d were refused; want 24 and %d", fired, len(started), refused, fired-24)
	}
	busy := execLatency(t, cn.id, 5)
	rss1, fds1 := procKiB(shim, "VmRSS"), procFds(shim)
	tree1, procs1 := treeRSS(shim)
	t.Logf("host processes below the shim during the flood: %v", treeKinds(shim))
	t.Logf("exec flood: %d started, %d refused; canary exec %v (idle %v, %.1f×); shim RSS %d → %d KiB, fds %d → %d; host processes below the shim %d → %d, their RSS %d → %d MiB (%.1f MiB per live exec)",
		len(started), refused, busy, idle, float64(busy)/float64(idle), rss0, rss1, fds0, fds1, procs0, procs1, tree0>>10, tree1>>10,
		float64(tree1-tree0)/1024/float64(max(1, len(started))))
	if busy > 3*idle {
		t.Errorf("canary exec latency %v during the flood, over 3× idle %v", busy, idle)
	}
	if rss1-rss0 > 64<<10 || fds1-fds0 > 8*24 {
		t.Errorf("the shim grew by %d KiB and %d fds for 24 live execs", rss1-rss0, fds1-fds0)
	}
	// Deleting execs frees their places.
	for _, id := range started[:4] {
		killExec(t, ctx, task, id)
	}
	p := *spec.Process
	p.Args = []string{"true"}
	if proc, pexit := startExec(t, ctx, task, "after-flood", &p, cio.NullIO); proc != nil {
		<-pexit
		_, _ = proc.Delete(ctx)
	}
	for _, id := range started[4:] {
		if p, err := task.LoadProcess(ctx, id, nil); err == nil {
			ch, _ := p.Wait(ctx)
			_ = p.Kill(ctx, 9)
			if ch != nil {
				<-ch
			}
			_, _ = p.Delete(ctx)
		}
	}

	// A huge output: 1 GiB through the shim's stdio copy.
	var out countWriter
	var peak atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				if r := int64(procKiB(shim, "VmRSS")); r > peak.Load() {
					peak.Store(r)
				}
			}
		}
	}()
	p.Args = []string{"head", "-c", strconv.Itoa(1 << 30), "/dev/zero"}
	rssBefore := procKiB(shim, "VmRSS")
	t0 := time.Now()
	proc, pexit := startExec(t, ctx, task, "huge", &p, cio.NewCreator(cio.WithStreams(nil, &out, &out)))
	<-pexit
	proc.IO().Wait()
	close(stop)
	_, _ = proc.Delete(ctx)
	t.Logf("huge output: %d MiB in %v; shim RSS %d KiB before, peak %d KiB", out.n.Load()>>20, time.Since(t0).Round(time.Millisecond), rssBefore, peak.Load())
	if out.n.Load() != 1<<30 {
		t.Errorf("the exec's output reached the client as %d bytes, want 1 GiB", out.n.Load())
	}
	if peak.Load()-int64(rssBefore) > 64<<10 {
		t.Errorf("the shim's RSS grew by %d KiB while copying 1 GiB", peak.Load()-int64(rssBefore))
	}
	cn.check(t)
}

// TestSecurityNodeExecFlood: execs spread over two tasks, each in its own
// sandbox and shim, are bounded by the node's cap ([resources]
// node_max_execs = 4, each task allowing 10): the fifth is refused with
// ResourceExhausted naming the setting whichever task it is for; deleting
// an exec frees its place for the other task, and so does the death of a
// shim (kill -9) for all of its task's execs.
func TestSecurityNodeExecFlood(t *testing.T) {
	c, ctx, img := clientEnv(t)
	checkNoLeaks(t)
	cfg := filepath.Join(t.TempDir(), "node.toml")
	if err := os.WriteFile(cfg, []byte("[resources]\nmax_execs = 10\nnode_max_execs = 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type sb struct {
		task client.Task
		exit <-chan client.ExitStatus
		proc specs.Process
	}
	var sbs []*sb
	for _, id := range []string{"sec-node-a", "sec-node-b"} {
		cont := newContainerWith(t, c, ctx, img, id, &runtimeoptions.Options{ConfigPath: cfg}, coci.WithProcessArgs("sleep", "3600"))
		task, exit := startTask(t, ctx, cont, cio.NullIO)
		s := &sb{task: task, exit: exit}
		defer func() {
			_ = s.task.Kill(ctx, 9)
			<-s.exit
			_, _ = s.task.Delete(ctx, client.WithProcessKill)
		}()
		spec, err := cont.Spec(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.proc = *spec.Process
		s.proc.Args = []string{"sleep", "600"}
		sbs = append(sbs, s)
	}
	a, b := sbs[0], sbs[1]
	execIn := func(s *sb, id string) error {
		p, err := s.task.Exec(ctx, id, &s.proc, cio.NullIO)
		if err != nil {
			return err
		}
		if err := p.Start(ctx); err != nil {
			_, _ = p.Delete(ctx)
			return err
		}
		return nil
	}
	refused := func(err error) bool {
		return errdefs.IsResourceExhausted(err) && strings.Contains(err.Error(), "node_max_execs")
	}
	for i, s := range []*sb{a, a, a, b} {
		if err := execIn(s, fmt.Sprintf("n%d", i)); err != nil {
			t.Fatalf("exec %d of 4: %v", i, err)
		}
	}
	for _, s := range []*sb{b, a} {
		if err := execIn(s, "over"); !refused(err) {
			t.Fatalf("a fifth exec on the node: %v, want ResourceExhausted naming node_max_execs", err)
		}
	}
	// An exec deleted: its place goes to the other task.
	killExec(t, ctx, a.task, "n0")
	if err := execIn(b, "b1"); err != nil {
		t.Fatalf("exec after another task's exec was deleted: %v", err)
	}
	if err := execIn(b, "b2"); !refused(err) {
		t.Fatalf("exec past the cap again: %v", err)
	}
	// Task a's shim killed: its two execs' places are free.
	shim := shimPid(t, "sec-node-a")
	if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exit // containerd's Wait fails with the shim; the channel then stays closed
	deadline := time.Now().Add(10 * time.Second)
	err := execIn(b, "b2")
	for ; refused(err) && time.Now().Before(deadline); err = execIn(b, "b2") {
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("exec after the other task's shim died: %v", err)
	}
	if err := execIn(b, "b3"); err != nil {
		t.Fatalf("second exec after the shim died: %v", err)
	}
	if err := execIn(b, "b4"); !refused(err) {
		t.Fatalf("exec past the cap after the shim died: %v", err)
	}
}

// killExec kills exec id of task with SIGKILL, waits for it and deletes it.
func killExec(t *testing.T, ctx context.Context, task client.Task, id string) {
	t.Helper()
	p, err := task.LoadProcess(ctx, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Kill(ctx, 9)
	<-ch
	if _, err := p.Delete(ctx); err != nil {
		t.Fatal(err)
	}
}
