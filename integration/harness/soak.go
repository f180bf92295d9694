package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/janitor"
)

// The faults a soak injects, each a kill -9 of one process (but the
// containerd restart).
const (
	// FaultShim kills the task's shim.
	FaultShim = "shim"
	// FaultSentry kills the Sentry of the task's sandbox (its own, or the
	// pool sandbox it adopted).
	FaultSentry = "sentry"
	// FaultGofer kills the gofer of the task's container.
	FaultGofer = "gofer"
	// FaultMonitor kills the monitor standing for the task's init (a task
	// in a pool sandbox).
	FaultMonitor = "monitor"
	// FaultPoolServer kills the server of the pool the task adopted from;
	// the soak starts it again after the cycle.
	FaultPoolServer = "pool-server"
	// FaultContainerd kills containerd and starts it again while the task
	// runs.
	FaultContainerd = "containerd-restart"
)

// When a fault is injected in a cycle.
const (
	// AtCreated is between the task's create and its start.
	AtCreated = "created"
	// AtRunning is once it runs, before the exec.
	AtRunning = "running"
	// AtExec is while an exec runs in it.
	AtExec = "exec"
)

// The kinds of task a soak cycle runs.
const (
	KindOwn   = "own"   // a sandbox of its own
	KindWarm  = "warm"  // a container in a warm pool's sandbox
	KindImage = "image" // a process in an image pool's sandbox
)

// taskFault reports whether fault is one the task itself must see fail
// (every kill of one of its processes); a pool server's death and a
// containerd restart must leave it working.
func taskFault(fault string) bool {
	return fault != "" && fault != FaultPoolServer && fault != FaultContainerd
}

// SoakOptions configures Soak.
type SoakOptions struct {
	// Containerd runs the tasks; Soak restarts it once.
	Containerd *Containerd
	// Namespace is the containerd namespace of the tasks.
	Namespace string
	// Image is the name of an unpacked image in Namespace with sleep and sh.
	Image string
	// Warm and ImagePool are the pools tasks adopt from (nil: none).
	Warm, ImagePool *Pool
	// Cycles is how many create→exec→destroy cycles run, one at a time.
	Cycles int
	// Seed seeds the choice of each cycle's task kind and fault.
	Seed int64
	// FaultRate is the share of cycles with a fault (0: 0.5).
	FaultRate float64
	// RestartAt is the cycle during which containerd restarts (< 0:
	// never; 0: at a third of the cycles).
	RestartAt int
	// Until, if set, is when no new cycle starts any more.
	Until time.Time
	// FIFODir is where the execs' IO fifos go.
	FIFODir string
	// Logf logs each cycle (nil: not logged).
	Logf func(format string, args ...any)
}

// SoakCycle is one cycle's plan and outcome.
type SoakCycle struct {
	N       int
	ID      string
	Kind    string
	Fault   string // "" when none
	At      string
	Victim  int    // the killed process's pid
	Failure string // what went wrong, "" if nothing
	Lost    string // an exit never reported, "" if none
	Took    time.Duration
}

// Sample is a long-lived process's open descriptors and resident memory
// after a cycle.
type Sample struct {
	Cycle, Pid, FDs int
	RSS             int64 // bytes
}

// SoakResult is what a soak found.
type SoakResult struct {
	Cycles []SoakCycle
	// Injected counts the faults by kind.
	Injected map[string]int
	// Failed counts the failed cycles; Unexpected lists the cycles whose
	// outcome does not match their fault: a failure without a fault that
	// hits the task, or such a fault without a failure.
	Failed     int
	Unexpected []string
	// LostExits lists the exits containerd never reported.
	LostExits []string
	// Samples are containerd's and each pool server's, by name.
	Samples map[string][]Sample
	// Leaks is what was left on the host afterwards (RunSoak); Log a
	// copy of containerd's log when there were any.
	Leaks []string
	Log   string
	Took  time.Duration
}

// TaskFaults is how many faults the tasks had to see fail.
func (r *SoakResult) TaskFaults() int {
	n := 0
	for f, k := range r.Injected {
		if taskFault(f) {
			n += k
		}
	}
	return n
}

// soak is a running Soak.
type soak struct {
	o   SoakOptions
	rng *rand.Rand
	cl  *client.Client
	ctx context.Context
	res *SoakResult
	// killed are the pool servers a fault killed, to start again.
	killed []*Pool
	mu     sync.Mutex
	exits  map[string]bool // containers whose init's TaskExit arrived
}

// Soak runs o.Cycles create→start→exec→destroy cycles against o.Containerd,
// each of a task kind chosen at random (its own sandbox, or adopted from
// one of the pools), a share of them with a fault: a kill -9 of the task's
// shim, Sentry, gofer or monitor, or of its pool's server, at a random
// point (between create and start, while it runs, during an exec), and one
// containerd restart. Each cycle's outcome is checked against its fault:
// a killed process of the task must fail the cycle (a start error, an exec
// that does not exit 0, an exit other than the SIGTERM the cycle ends it
// with), anything else must not; and every exit must be reported. A
// killed pool server is started again after the cycle. Everything is
// seeded by o.Seed and logged with o.Logf.
func Soak(ctx context.Context, o SoakOptions) (*SoakResult, error) {
	if o.FaultRate == 0 {
		o.FaultRate = 0.5
	}
	if o.RestartAt == 0 {
		o.RestartAt = o.Cycles / 3
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	s := &soak{o: o, rng: rand.New(rand.NewSource(o.Seed)), ctx: namespaces.WithNamespace(ctx, o.Namespace),
		res: &SoakResult{Injected: map[string]int{}, Samples: map[string][]Sample{}}, exits: map[string]bool{}}
	if err := s.connect(); err != nil {
		return nil, err
	}
	defer func() { s.cl.Close() }()
	t0 := time.Now()
	o.Logf("soak: %d cycles, seed %d, fault rate %.2f, containerd restart at cycle %d", o.Cycles, o.Seed, o.FaultRate, o.RestartAt)
	for n := 0; n < o.Cycles; n++ {
		if !o.Until.IsZero() && time.Now().After(o.Until) {
			o.Logf("soak: out of time after %d cycles", n)
			break
		}
		c := s.plan(n)
		s.run(&c)
		s.res.Cycles = append(s.res.Cycles, c)
		if c.Fault != "" {
			s.res.Injected[c.Fault]++
		}
		if c.Failure != "" {
			s.res.Failed++
		}
		if c.Lost != "" {
			s.res.LostExits = append(s.res.LostExits, fmt.Sprintf("cycle %d (%s, %s %s): %s", c.N, c.Kind, c.Fault, c.At, c.Lost))
		}
		if fails := c.Failure != ""; fails != taskFault(c.Fault) {
			what := "no failure"
			if fails {
				what = "failure: " + c.Failure
			}
			s.res.Unexpected = append(s.res.Unexpected, fmt.Sprintf("cycle %d (%s, fault %q %s): %s", c.N, c.Kind, c.Fault, c.At, what))
		}
		o.Logf("soak: cycle %3d %-5s fault %-18s %-7s victim %-7d %6s  failure=%q lost=%q", c.N, c.Kind, c.Fault, c.At, c.Victim,
			c.Took.Round(time.Millisecond), c.Failure, c.Lost)
		if c.Fault == FaultPoolServer {
			if err := s.restartPools(); err != nil {
				return s.res, err
			}
		}
		s.sample(n)
		if err := ctx.Err(); err != nil {
			return s.res, err
		}
	}
	s.res.Took = time.Since(t0)
	return s.res, nil
}

// connect (re)connects to containerd.
func (s *soak) connect() error {
	if s.cl != nil {
		s.cl.Close()
	}
	cl, err := client.New(s.o.Containerd.Socket(), client.WithTimeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("connect to containerd: %w", err)
	}
	s.cl = cl
	// The init exits containerd publishes, by container (TaskExit events,
	// which event-driven clients such as the CRI plugin go by).
	evs, errs := cl.Subscribe(s.ctx, `topic=="/tasks/exit"`)
	go func() {
		for {
			select {
			case env := <-evs:
				v, err := typeurl.UnmarshalAny(env.Event)
				if ev, ok := v.(*apievents.TaskExit); err == nil && ok && ev.ID == ev.ContainerID {
					s.mu.Lock()
					s.exits[ev.ContainerID] = true
					s.mu.Unlock()
				}
			case <-errs:
				return // the client closed (a containerd restart: connect subscribes again)
			}
		}
	}()
	return nil
}

// exitEvent reports whether containerd published the exit of task id's
// init, waiting up to wait for it.
func (s *soak) exitEvent(id string, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		s.mu.Lock()
		ok := s.exits[id]
		s.mu.Unlock()
		if ok || time.Now().After(deadline) {
			return ok
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// plan picks cycle n's task kind and fault. Which process is killed is
// settled once the task exists (run): a pool task may boot its own
// sandbox after all.
func (s *soak) plan(n int) SoakCycle {
	kinds := []string{KindOwn}
	if s.o.Warm != nil {
		kinds = append(kinds, KindWarm)
	}
	if s.o.ImagePool != nil {
		kinds = append(kinds, KindImage)
	}
	c := SoakCycle{N: n, ID: fmt.Sprintf("soak-%04d", n), Kind: kinds[s.rng.Intn(len(kinds))]}
	ats := []string{AtCreated, AtRunning, AtExec}
	c.At = ats[s.rng.Intn(len(ats))]
	switch {
	case n == s.o.RestartAt:
		c.Fault, c.At = FaultContainerd, AtRunning
	case s.rng.Float64() < s.o.FaultRate:
		c.Fault = "?" // settled in run
	default:
		c.At = ""
	}
	return c
}

// faultFor picks the fault of a cycle whose task is of kind, at point at;
// a pool server's only in the first half of the soak (so that the last
// server's growth is measured over the second).
func (s *soak) faultFor(c *SoakCycle) string {
	var fs []string
	switch c.Kind {
	case KindOwn:
		fs = []string{FaultShim, FaultSentry, FaultGofer}
	case KindWarm:
		fs = []string{FaultShim, FaultSentry, FaultMonitor}
		if c.At != AtCreated {
			fs = append(fs, FaultGofer) // its monitor spawns it at start
		}
	case KindImage:
		fs = []string{FaultShim, FaultSentry, FaultMonitor}
	}
	if c.Kind != KindOwn && c.N < s.o.Cycles/2 {
		fs = append(fs, FaultPoolServer)
	}
	// The least injected so far (at random among those), so that every
	// kind is injected about as often.
	least := -1
	var pick []string
	for _, f := range fs {
		switch n := s.res.Injected[f]; {
		case least < 0 || n < least:
			least, pick = n, []string{f}
		case n == least:
			pick = append(pick, f)
		}
	}
	return pick[s.rng.Intn(len(pick))]
}

// pool is the pool a cycle of kind adopts from.
func (s *soak) pool(kind string) *Pool {
	switch kind {
	case KindWarm:
		return s.o.Warm
	case KindImage:
		return s.o.ImagePool
	}
	return nil
}

// Timeouts of a cycle's steps.
const (
	soakCycle = 3 * time.Minute  // a whole cycle
	soakStep  = time.Minute      // a container's removal
	soakExit  = 30 * time.Second // an exit, once the process is gone or killed
	// soakGoferStop bounds the wait for gVisor to stop a container whose
	// gofer was killed while it ran.
	soakGoferStop = 5 * time.Second
	soakLong      = 6 * time.Second     // the exec a fault hits
	soakKill      = syscall.SIGTERM     // how a cycle ends its task
	soakOK        = 128 + int(soakKill) // and the exit that ends it as planned
)

// run runs cycle c, recording its failure and lost exits.
func (s *soak) run(c *SoakCycle) {
	t0 := time.Now()
	defer func() { c.Took = time.Since(t0) }()
	ctx, cancel := context.WithTimeout(s.ctx, soakCycle)
	defer cancel()
	fail := func(format string, args ...any) {
		if c.Failure == "" {
			c.Failure = fmt.Sprintf(format, args...)
		}
	}
	var opts any
	if p := s.pool(c.Kind); p != nil {
		opts = &runtimeoptions.Options{ConfigPath: p.Config}
	}
	img, err := s.cl.GetImage(ctx, s.o.Image)
	if err != nil {
		fail("image: %v", err)
		return
	}
	cont, err := s.cl.NewContainer(ctx, c.ID, client.WithNewSnapshot(c.ID, img),
		client.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs("sleep", "3600")), client.WithRuntime(api.RuntimeType, opts))
	if err != nil {
		fail("container: %v", err)
		return
	}
	defer func() {
		if err := s.removeContainer(c.ID); err != nil {
			fail("%v", err)
		}
	}()
	task, err := cont.NewTask(ctx, cio.NullIO)
	if err != nil {
		fail("create: %v", err)
		if c.Fault == "?" {
			c.Fault, c.At = "", ""
		}
		return
	}
	sb := Adopted(s.o.Namespace, c.ID)
	switch {
	case sb == "":
		c.Kind = KindOwn
	case c.Kind == KindImage && !isProcessTask(sb, c.ID):
		c.Kind = KindWarm // an image pool's task that needs a container
	}
	if c.Fault == "?" {
		c.Fault = s.faultFor(c)
	}
	exitCh, err := task.Wait(ctx)
	if err != nil {
		fail("wait: %v", err)
		return
	}
	var exit *client.ExitStatus // the task's, once reported
	inject := func(at string) {
		if c.Fault == "" || c.At != at {
			return
		}
		pid, err := s.inject(c, task, sb)
		c.Victim = pid
		if err != nil {
			fail("inject %s: %v", c.Fault, err)
		}
	}
	inject(AtCreated)
	if err := task.Start(ctx); err != nil {
		fail("start: %v", err)
	} else {
		inject(AtRunning)
		if c.Fault == FaultGofer && c.At == AtRunning && c.Failure == "" {
			// gVisor stops the container once it notices its gofer
			// gone, a moment later: wait for that, so that the exec
			// meets a stopped task instead of racing the notice (an
			// exec that won the race made the cycle succeed).
			select {
			case st := <-exitCh:
				exit = &st
			case <-time.After(soakGoferStop):
			}
		}
		if c.Fault == FaultContainerd {
			// The task survived; its Wait did not (the stream broke).
			if cont, err = s.cl.LoadContainer(ctx, c.ID); err == nil {
				task, err = cont.Task(ctx, nil)
			}
			if err == nil {
				exitCh, err = task.Wait(ctx)
			}
			if err != nil {
				fail("after the restart: %v", err)
			}
		}
		if c.Failure == "" {
			if err := s.exec(ctx, c, cont, task, func() { inject(AtExec) }); err != nil {
				fail("%v", err)
			}
		}
	}
	// End the task as planned, unless it is gone already.
	if exit == nil {
		select {
		case st := <-exitCh:
			exit = &st
		default:
			if err := task.Kill(ctx, soakKill); err != nil && !errdefs.IsNotFound(err) {
				fail("kill: %v", err)
			}
		}
	}
	if exit == nil {
		select {
		case st := <-exitCh:
			exit = &st
		case <-time.After(soakExit):
			c.Lost = fmt.Sprintf("task %s: no exit %s after it was killed or its process died", c.ID, soakExit)
		}
	}
	if exit != nil {
		code, _, err := exit.Result()
		switch {
		case err != nil:
			fail("exit: %v", err)
		case int(code) != soakOK:
			fail("exit status %d", code)
		}
	}
	if _, err := task.Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
		fail("delete: %v", err)
	}
	// The exit event too.
	if c.Lost == "" && !s.exitEvent(c.ID, 10*time.Second) {
		c.Lost = fmt.Sprintf("task %s: no TaskExit event for its init", c.ID)
	}
}

// exec runs a command in the task (a short one that must print "ok", or,
// when the fault is to hit an exec, a long one during which inject runs).
func (s *soak) exec(ctx context.Context, c *SoakCycle, cont client.Container, task client.Task, inject func()) error {
	spec, err := cont.Spec(ctx)
	if err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	ps := *spec.Process
	long := c.Fault != "" && c.At == AtExec
	ps.Args = []string{"sh", "-c", "echo ok"}
	if long {
		ps.Args = []string{"sleep", strconv.Itoa(int(soakLong / time.Second))}
	}
	var out syncBuf
	p, err := task.Exec(ctx, "x", &ps, cio.NewCreator(cio.WithStreams(nil, &out, &out), cio.WithFIFODir(s.o.FIFODir)))
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	defer func() {
		if _, err := p.Delete(context.WithoutCancel(ctx), client.WithProcessKill); err != nil {
			// containerd forgot the exec with its dead shim: the client's
			// Delete then leaves the exec's fifos to the client.
			if io := p.IO(); io != nil {
				io.Cancel()
				io.Close()
			}
		}
	}()
	ch, err := p.Wait(ctx)
	if err != nil {
		return fmt.Errorf("exec wait: %w", err)
	}
	if err := p.Start(ctx); err != nil {
		return fmt.Errorf("exec start: %w", err)
	}
	if long {
		time.Sleep(time.Duration(s.rng.Intn(300)) * time.Millisecond)
		inject()
	}
	select {
	case st := <-ch:
		// The exit can come before the shim has copied the last output.
		ioDone := make(chan struct{})
		go func() { p.IO().Wait(); close(ioDone) }()
		select {
		case <-ioDone:
		case <-time.After(soakExit):
		}
		code, _, err := st.Result()
		switch {
		case err != nil:
			return fmt.Errorf("exec: %w", err)
		case code != 0:
			return fmt.Errorf("exec exit status %d", code)
		case !long && strings.TrimSpace(out.String()) != "ok":
			return fmt.Errorf("exec output %q, want ok", out.String())
		}
	case <-time.After(soakLong + soakExit):
		c.Lost = fmt.Sprintf("exec in %s: no exit after %s", c.ID, soakLong+soakExit)
		return fmt.Errorf("exec: no exit")
	}
	return nil
}

// inject kills cycle c's victim; for a containerd restart it restarts
// containerd and connects again.
func (s *soak) inject(c *SoakCycle, task client.Task, sb string) (int, error) {
	var pid int
	var err error
	switch c.Fault {
	case FaultContainerd:
		pid = s.o.Containerd.Pid()
		if err := s.o.Containerd.Restart(s.ctx); err != nil {
			return pid, err
		}
		return pid, s.connect()
	case FaultShim:
		pid, err = ShimPid(s.o.Containerd.Socket(), c.ID)
	case FaultSentry:
		if sb == "" {
			pid = int(task.Pid()) // a sandbox of its own: the task's init is its Sentry
		} else {
			pid, err = SandboxPid(sb)
		}
	case FaultMonitor:
		pid = int(task.Pid())
	case FaultGofer:
		var shim int
		if shim, err = ShimPid(s.o.Containerd.Socket(), c.ID); err == nil {
			pid, err = Gofer(shim)
		}
	case FaultPoolServer:
		p := s.pool(c.Kind)
		pid = p.Pid()
		s.killed = append(s.killed, p)
	default:
		return 0, fmt.Errorf("unknown fault %q", c.Fault)
	}
	if err != nil {
		return 0, err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return pid, fmt.Errorf("kill %d: %w", pid, err)
	}
	return pid, nil
}

// restartPools starts again the pool servers a fault killed.
func (s *soak) restartPools() error {
	for _, p := range s.killed {
		if err := p.Restart(s.ctx); err != nil {
			return fmt.Errorf("restart pool server: %w", err)
		}
	}
	s.killed = nil
	return nil
}

// removeContainer deletes container id and its snapshot; a task a failed
// cycle left (containerd still lists it) is deleted first.
func (s *soak) removeContainer(id string) error {
	ctx, cancel := context.WithTimeout(s.ctx, soakStep)
	defer cancel()
	cont, err := s.cl.LoadContainer(ctx, id)
	if err != nil {
		return fmt.Errorf("load container %s: %w", id, err)
	}
	if task, err := cont.Task(ctx, nil); err == nil {
		if _, err := task.Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("delete task %s: %w", id, err)
		}
	}
	if err := cont.Delete(ctx, client.WithSnapshotCleanup); err != nil {
		return fmt.Errorf("delete container %s: %w", id, err)
	}
	return nil
}

// sample records containerd's and the pool servers' descriptors and RSS.
func (s *soak) sample(n int) {
	add := func(name string, pid int) {
		fds, rss, ok := ProcFDsRSS(pid)
		if ok {
			s.res.Samples[name] = append(s.res.Samples[name], Sample{Cycle: n, Pid: pid, FDs: fds, RSS: rss})
		}
	}
	add("containerd", s.o.Containerd.Pid())
	if s.o.Warm != nil {
		add("warm pool server", s.o.Warm.Pid())
	}
	if s.o.ImagePool != nil {
		add("image pool server", s.o.ImagePool.Pid())
	}
}

// Growth is a bound on a long-lived process's growth over a soak.
type Growth struct {
	FDs int
	RSS int64 // bytes
}

// Grown checks each long-lived process's samples of its last incarnation
// (a restarted process starts anew): the most descriptors and RSS of its
// last window of samples against those of its first window after warmup
// samples, allowed to grow by at most bound. It lists the processes that
// grew more, and describes every one measured.
func (r *SoakResult) Grown(warmup, window int, bound Growth) (grown, measured []string) {
	names := make([]string, 0, len(r.Samples))
	for name := range r.Samples {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		all := r.Samples[name]
		last := all[len(all)-1].Pid
		var ss []Sample
		for _, x := range all {
			if x.Pid == last {
				ss = append(ss, x)
			}
		}
		if len(ss) < warmup+2*window {
			measured = append(measured, fmt.Sprintf("%s (pid %d): only %d cycles since its start, not measured", name, last, len(ss)))
			continue
		}
		peak := func(w []Sample) (int, int64) {
			var f int
			var m int64
			for _, x := range w {
				f, m = max(f, x.FDs), max(m, x.RSS)
			}
			return f, m
		}
		f0, m0 := peak(ss[warmup : warmup+window])
		f1, m1 := peak(ss[len(ss)-window:])
		line := fmt.Sprintf("%s (pid %d, cycles %d-%d): fds %d → %d, RSS %.1f → %.1f MiB", name, last, ss[warmup].Cycle, ss[len(ss)-1].Cycle,
			f0, f1, float64(m0)/(1<<20), float64(m1)/(1<<20))
		measured = append(measured, line)
		if f1 > f0+bound.FDs || m1 > m0+bound.RSS {
			grown = append(grown, line)
		}
	}
	return grown, measured
}

// janitorFindings is what a dry run of the janitor against c would
// reclaim, one line each.
func janitorFindings(ctx context.Context, c *Containerd) []string {
	var out []string
	r := janitor.Sweep(ctx, janitor.Options{Layout: State, Containerd: []string{c.Socket()}, DryRun: true})
	for _, it := range r.Items {
		if it.What == SharedNetNS() {
			// Node state by design (gVisor's --shared-root pin), which
			// the janitor releases once no sandbox is left: not a leak.
			continue
		}
		out = append(out, fmt.Sprintf("janitor: %s %s (%s)", it.Kind, it.What, it.Why))
	}
	return out
}

// janitorKey names a finding without its reason (which may say how long
// ago something was last used).
func janitorKey(finding string) string {
	k, _, _ := strings.Cut(finding, " (")
	return k
}

// SoakLeaks waits up to wait for the host to be back at before (teardown
// is asynchronous in places: shim exits) and lists what is left, with
// what a dry run of the janitor against c would reclaim that it would
// not have reclaimed before the soak (preexisting, from janitorFindings:
// e.g. a relay copy an earlier run left, unused for an hour since, is
// not the soak's).
func SoakLeaks(ctx context.Context, c *Containerd, ns string, before HostState, preexisting []string, wait time.Duration, fifoDirs ...string) []string {
	var left []string
	deadline := time.Now().Add(wait)
	for {
		left = ours(c.Bins, Leaked(before, Snapshot(c, ns, fifoDirs...)))
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	had := map[string]bool{}
	for _, f := range preexisting {
		had[janitorKey(f)] = true
	}
	for _, f := range janitorFindings(ctx, c) {
		if !had[janitorKey(f)] {
			left = append(left, f)
		}
	}
	return left
}

// ours drops from leaked the processes of binaries neither bins' nor
// below the state directory (other gvx builds' on a shared machine: not
// the soak's).
func ours(bins Bins, leaked []string) []string {
	var out []string
	for _, l := range leaked {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "process:" && !strings.HasPrefix(f[2], filepath.Clean(bins.GVX)+"/") && !strings.HasPrefix(f[2], State.Dir+"/") {
			continue
		}
		out = append(out, l)
	}
	return out
}

// ShimPid finds the shim of task id of the containerd at socket.
func ShimPid(socket, id string) (int, error) {
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		args := cmdline(d)
		if len(args) == 0 || filepath.Base(args[0]) != api.ShimBinary {
			continue
		}
		var idOK, ours bool
		for i := 0; i+1 < len(args); i++ {
			idOK = idOK || args[i] == "-id" && args[i+1] == id
			ours = ours || args[i] == "-address" && args[i+1] == socket
		}
		if idOK && ours {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no shim process for %s", id)
}

// Gofer is the gofer below process pid (a task's shim): gVisor names its
// gofers runsc-gofer.
func Gofer(pid int) (int, error) {
	for _, d := range Descendants(pid) {
		if args := cmdline(fmt.Sprintf("/proc/%d/cmdline", d)); len(args) > 0 && args[0] == "runsc-gofer" {
			return d, nil
		}
	}
	return 0, fmt.Errorf("no gofer below process %d", pid)
}

func cmdline(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

// isProcessTask reports whether task id runs as a process in pool sandbox
// sb's root container (sentry/exectask's record is in its root).
func isProcessTask(sb, id string) bool {
	_, err := os.Stat(SandboxDir(sb).Root().TaskRecord(id))
	return err == nil
}

// ProcFDsRSS is process pid's count of open descriptors and its resident
// memory (VmRSS).
func ProcFDsRSS(pid int) (fds int, rss int64, ok bool) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, 0, false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, false
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kib, _ := strconv.ParseInt(f[1], 10, 64)
			rss = kib << 10
		}
	}
	return len(ents), rss, true
}

// syncBuf is a bytes.Buffer safe for the IO copiers and a reader.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// SoakPoolSize is the size of each of RunSoak's pools.
const SoakPoolSize = 2

// RunSoak runs Soak on a containerd of its own (bins, with images' busybox
// in namespace ns) with a warm pool and an image pool of SoakPoolSize, the
// pools' periodic janitor off (what the soak leaves must be reclaimed by
// the paths that own it, not swept up later); o's Containerd, Namespace,
// Image, pools and FIFODir are RunSoak's. Once the cycles are over it
// stops the pools and lists in the result's Leaks what is left on the
// host of the soak's tasks and pools, then stops the containerd.
func RunSoak(ctx context.Context, bins Bins, images, ns string, o SoakOptions) (_ *SoakResult, retErr error) {
	ctx = namespaces.WithNamespace(ctx, ns)
	c, err := Start(ctx, bins)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	cl, err := client.New(c.Socket())
	if err != nil {
		return nil, err
	}
	img, err := ImportArchive(ctx, cl, filepath.Join(images, "busybox.tar"), "")
	cl.Close()
	if err != nil {
		return nil, err
	}
	fifos := filepath.Join(c.Dir, "fifo")
	before := Snapshot(c, ns, fifos)
	preexisting := janitorFindings(ctx, c)
	for _, f := range preexisting {
		if o.Logf != nil {
			o.Logf("soak: on the host before the soak, not counted as its leak: %s", f)
		}
	}
	var pools []*Pool
	stop := func() error {
		var errs []error
		for _, p := range pools {
			errs = append(errs, p.Stop())
			_ = os.RemoveAll(filepath.Dir(p.Config))
		}
		pools = nil
		return errors.Join(errs...)
	}
	defer func() {
		if err := stop(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	noSweep := "[janitor]\ninterval = \"0s\"\n"
	for _, extra := range []string{"", fmt.Sprintf("image = %q\ncontainerd = %q\nnamespace = %q\n", img.Name(), c.Socket(), ns)} {
		dir, err := os.MkdirTemp("", "gvx-soak-")
		if err != nil {
			return nil, err
		}
		p, err := StartPoolWithConfig(ctx, bins.GVX, dir, SoakPoolSize, extra+noSweep)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		pools = append(pools, p)
	}
	o.Containerd, o.Namespace, o.Image, o.Warm, o.ImagePool, o.FIFODir = c, ns, img.Name(), pools[0], pools[1], fifos
	started := slices.Clone(pools)
	res, err := Soak(ctx, o)
	if res == nil {
		return nil, err
	}
	// What a soak stopped half-way left is worth listing too.
	if serr := stop(); serr != nil {
		return res, errors.Join(err, serr)
	}
	res.Leaks = SoakLeaks(context.WithoutCancel(ctx), c, ns, before, preexisting, 20*time.Second, fifos)
	if len(res.Leaks) > 0 {
		// containerd's log goes with its directory: keep a copy.
		if data, rerr := os.ReadFile(filepath.Join(c.Dir, "containerd.log")); rerr == nil {
			res.Log = filepath.Join(os.TempDir(), fmt.Sprintf("gvx-soak-%d-containerd.log", o.Seed))
			_ = os.WriteFile(res.Log, data, 0o644)
		}
		// And the pool servers' (each server's runs, restarts included).
		for i, p := range started {
			_ = os.WriteFile(filepath.Join(os.TempDir(), fmt.Sprintf("gvx-soak-%d-pool-%d.log", o.Seed, i)), []byte(p.Log()), 0o644)
		}
		for i, l := range res.Leaks {
			if d, ok := strings.CutPrefix(l, "state: "); ok {
				if ents, err := os.ReadDir(d); err == nil {
					var names []string
					for _, e := range ents {
						names = append(names, e.Name())
					}
					res.Leaks[i] += fmt.Sprintf(" (holding %v)", names)
				}
			}
		}
	}
	return res, err
}
