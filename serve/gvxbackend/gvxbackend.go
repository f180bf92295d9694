// Package gvxbackend runs gvx serve's sandboxes on gvx's Go SDK.
//
// Each E2B sandbox is one gvx.Sandbox in the service's containerd
// namespace ("gvx-serve"), labelled with its template, so that a later
// service can find (Attach) or remove it by id; commands are the SDK's
// streaming execs.
package gvxbackend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/log"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/rollout"
	"github.com/gvxrun/gvx/serve/backend"
)

// Namespace is the containerd namespace of gvx serve's sandboxes.
const Namespace = "gvx-serve"

// LabelTemplate is the label naming a sandbox's template.
const LabelTemplate = "gvx-serve.template"

// Options configure the backend.
type Options struct {
	// Containerd, RuntimeConfig, StateDir and Progress are the SDK's
	// (gvx.Options); an empty Containerd runs the SDK's embedded one.
	Containerd, RuntimeConfig, StateDir string
	Progress                            io.Writer
	// CheckpointDir and Spares are the SDK's: where checkpoints are kept,
	// and how many restored sandboxes wait ready for each.
	CheckpointDir string
	Spares        int
}

// Backend makes sandboxes through a gvx.Client, from a template's pool
// when it has one.
type Backend struct {
	c *gvx.Client

	mu    sync.Mutex
	pools map[string]*gvx.Pool // template name → its pool
	hot   map[string]*hotSet   // template name → its hot sandboxes
}

// New connects to containerd (the embedded one by default).
func New(ctx context.Context, o Options) (*Backend, error) {
	c, err := gvx.Connect(ctx, gvx.Options{Containerd: o.Containerd, Namespace: Namespace,
		RuntimeConfig: o.RuntimeConfig, StateDir: o.StateDir, Progress: o.Progress,
		CheckpointDir: o.CheckpointDir, Spares: o.Spares})
	if err != nil {
		return nil, err
	}
	return &Backend{c: c, pools: map[string]*gvx.Pool{}, hot: map[string]*hotSet{}}, nil
}

// Client is the SDK client the backend uses.
func (b *Backend) Client() *gvx.Client { return b.c }

// config is the sandbox Config of template t, with o's env and narrowing.
func config(id string, t backend.Template, o backend.CreateOptions) gvx.Config {
	env := o.Env
	cmd := t.Cmd
	if len(cmd) == 0 {
		cmd = []string{"sleep", "infinity"}
	}
	cfg := gvx.Config{
		ID: id, Image: t.Image, Entrypoint: cmd, Env: append(append([]string(nil), t.Env...), env...),
		Resources: gvx.Resources{MemoryBytes: t.MemoryMB << 20, CPUMillis: t.CPUMillis, DiskBytes: t.DiskMB << 20},
		Docker:    t.Docker,
		Labels:    map[string]string{LabelTemplate: t.Name},
	}
	if t.Golden != "" {
		cfg.Mounts = []gvx.Mount{{Type: gvx.MountVolume, Source: t.Golden, Target: "/var/lib/docker", Clone: true}}
	}
	if t.Network == backend.NetworkNAT {
		cfg.Network = gvx.NetworkNAT
		cfg.NAT = natConfig(t.NAT, o.Narrow)
	}
	return cfg
}

// natConfig is the SDK's NAT of a template's NAT settings n (nil: the
// gvx config's) narrowed by narrow; nil when both are nil.
func natConfig(n *backend.NAT, narrow *api.Narrow) *gvx.NAT {
	if n == nil && narrow == nil {
		return nil
	}
	out := &gvx.NAT{}
	if n != nil {
		// CheckTemplate checked the bandwidth.
		bw, _ := n.BandwidthBytes()
		out.DNS, out.MaxConnections, out.Bandwidth = n.DNS, n.MaxConnections, bw
		if e := n.Egress; e != nil {
			out.EgressDefault, out.EgressAllow, out.EgressDeny = e.Default, e.Allow, e.Deny
		}
	}
	if narrow != nil {
		out.NarrowDefault, out.NarrowAllow, out.NarrowDeny = narrow.Default, narrow.Allow, narrow.Deny
	}
	return out
}

// Create starts sandbox id from t: a lease of t's pool for a lease
// template (waiting for one while every sandbox is out), else a hot
// sandbox of t's when one is ready and o has no env (its id is the
// backend's own: BackendID), else from t's pool if it has one (a booted
// sandbox, or one booted now when none is ready), else booted now. A sandbox booted ahead gets o's
// narrowing of its NAT's policy before it is returned (one that cannot
// is closed, and a sandbox booted with it instead).
func (b *Backend) Create(ctx context.Context, id string, t backend.Template, o backend.CreateOptions) (backend.Sandbox, error) {
	b.mu.Lock()
	p, h := b.pools[t.Name], b.hot[t.Name]
	b.mu.Unlock()
	var sb *gvx.Sandbox
	if h != nil && len(o.Env) == 0 {
		if sb = h.take(); sb == nil {
			h.wake() // none ready: its last acquire may have failed
		}
	}
	var err error
	if t.Lease && p != nil {
		return leaseOf(ctx, p, o)
	}
	if sb == nil && p != nil {
		sb, err = p.Acquire(ctx, gvx.AcquireOptions{ID: id, Env: o.Env})
		if err != nil {
			return nil, err
		}
	}
	if sb != nil && o.Narrow != nil {
		// Booted ahead with the template's policy.
		if err := narrow(ctx, sb, o.Narrow); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx serve: template %s: a pooled sandbox could not be narrowed; booting one with the narrowing", t.Name)
			_ = sb.Close(ctx)
			sb = nil
		}
	}
	if sb == nil {
		if sb, err = b.c.New(ctx, config(id, t, o)); err != nil {
			return nil, err
		}
	}
	return &sandbox{sb: sb}, nil
}

// narrower is a sandbox or lease whose NAT's policy can be narrowed.
type narrower interface {
	NarrowEgress(ctx context.Context, def string, allow, deny []string) error
}

// narrow sets n as sb's NAT's narrowing (a gvx.Sandbox or gvx.Lease).
func narrow(ctx context.Context, sb narrower, n *api.Narrow) error {
	if n == nil {
		return sb.NarrowEgress(ctx, "", nil, nil)
	}
	return sb.NarrowEgress(ctx, n.Default, n.Allow, n.Deny)
}

// Attach finds sandbox id of an earlier service.
func (b *Backend) Attach(ctx context.Context, id string, _ backend.Template) (backend.Sandbox, error) {
	sb, err := b.c.Attach(ctx, id)
	if errors.Is(err, gvx.ErrNotFound) {
		return nil, backend.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if st, err := sb.Status(ctx); err != nil || (st != gvx.StatusRunning && st != gvx.StatusPaused) {
		_ = sb.Close(ctx)
		return nil, fmt.Errorf("sandbox %s is %s: %w", id, st, backend.ErrNotFound)
	}
	return &sandbox{sb: sb}, nil
}

// Destroy removes what is left of sandbox id.
func (b *Backend) Destroy(ctx context.Context, id string) error { return b.c.Remove(ctx, id) }

// List returns the ids of the service's sandboxes.
func (b *Backend) List(ctx context.Context) ([]string, error) {
	infos, err := b.c.List(ctx)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	hot := map[string]bool{}
	for _, h := range b.hot {
		for id := range h.ids() {
			hot[id] = true
		}
	}
	b.mu.Unlock()
	var ids []string
	for _, in := range infos {
		if _, ok := in.Labels[LabelTemplate]; ok && !hot[in.ID] {
			ids = append(ids, in.ID) // hot sandboxes are the backend's, not the service's
		}
	}
	// And the containers restored for rollbacks and forks that are no
	// sandbox's backing (spares, and whatever a crash left half made):
	// nothing knows them, so a restarted service removes them. A backing
	// is listed above as its sandbox.
	conts, err := b.c.Containerd().Containers(b.c.Context(ctx), fmt.Sprintf("labels.%q", rollout.LabelRole))
	if err != nil {
		return nil, err
	}
	for _, c := range conts {
		info, err := c.Info(b.c.Context(ctx), client.WithoutRefreshedMetadata) // as listed
		if err == nil && info.Labels[rollout.LabelSandbox] == "" {
			ids = append(ids, c.ID())
		}
	}
	return ids, nil
}

// Prepare starts t's pool when t asks for one (PoolSize > 0), replacing
// the pool of an earlier template of that name. A pool that cannot start
// is logged and the template served without one (sandboxes boot at
// create). A template without a pool has its image prefetched (imported
// and unpacked: gvx.Client.Prefetch), so that its first create does not
// pay for that; a failure is logged (the create says it again).
func (b *Backend) Prepare(ctx context.Context, t backend.Template) error {
	b.Forget(ctx, t.Name)
	if t.PoolSize == 0 {
		if t.Image != "" {
			if err := b.c.Prefetch(ctx, t.Image); err != nil {
				log.G(ctx).WithError(err).Warnf("gvx serve: template %s: its image is not ready", t.Name)
			}
		}
		return nil
	}
	p, err := b.c.NewPool(ctx, gvx.PoolConfig{Name: poolName(t.Name), Template: config("", t, backend.CreateOptions{}), Size: t.PoolSize, Checkpointable: t.Checkpointable, Leases: t.Lease})
	if err != nil {
		if errors.Is(err, gvx.ErrInvalid) {
			return err
		}
		log.G(ctx).WithError(err).Warnf("gvx serve: template %s has no pool; its sandboxes boot at create", t.Name)
		return nil
	}
	b.mu.Lock()
	b.pools[t.Name] = p
	if n := t.HotSize(); n > 0 {
		b.hot[t.Name] = newHotSet(t, p, n)
	}
	b.mu.Unlock()
	return nil
}

// poolName is a pool name ([a-z0-9]+) for template name.
func poolName(name string) string {
	var out []byte
	for _, c := range []byte(name) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			out = append(out, c)
		}
	}
	h := sha256.Sum256([]byte(name))
	return "serve" + string(out) + hex.EncodeToString(h[:3])
}

// PoolStatus is template name's pool's fill level.
func (b *Backend) PoolStatus(ctx context.Context, name string) (backend.PoolStatus, bool, error) {
	b.mu.Lock()
	p, h := b.pools[name], b.hot[name]
	b.mu.Unlock()
	if p == nil {
		return backend.PoolStatus{}, false, nil
	}
	st, err := p.Status(ctx)
	out := backend.PoolStatus{Size: st.Size, Ready: st.Ready}
	if h != nil {
		out.Hot, out.HotReady = h.status()
	}
	return out, true, err
}

// Forget closes template name's pool, if it has one: its ready
// sandboxes and those acquired from it (gvx.Pool.Close closes both; the
// service forgets a template only when none of its sandboxes is left).
func (b *Backend) Forget(ctx context.Context, name string) {
	b.mu.Lock()
	p, h := b.pools[name], b.hot[name]
	delete(b.pools, name)
	delete(b.hot, name)
	b.mu.Unlock()
	if h != nil {
		h.close(ctx)
	}
	if p != nil {
		if err := p.Close(ctx); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx serve: close the pool of template %s", name)
		}
	}
}

// Close closes the SDK client. The sandboxes stay for the next service,
// and so do the pools' servers until this process exits (they stop with
// it, destroying their ready sandboxes): gvx.Pool.Close would also close
// the sandboxes acquired from them.
func (b *Backend) Close() error {
	b.mu.Lock()
	hot := b.hot
	b.hot = map[string]*hotSet{}
	b.mu.Unlock()
	for _, h := range hot {
		h.close(context.Background()) // not the service's sandboxes yet
	}
	return b.c.Close(context.Background())
}

// ClosePools closes every pool and the sandboxes acquired from them
// (gvx serve --kill-on-exit).
func (b *Backend) ClosePools(ctx context.Context) {
	b.mu.Lock()
	var names []string
	for n := range b.pools {
		names = append(names, n)
	}
	b.mu.Unlock()
	for _, n := range names {
		b.Forget(ctx, n)
	}
}

type sandbox struct {
	sb *gvx.Sandbox
	cpuMeter
}

func (s *sandbox) Exec(ctx context.Context, c backend.Cmd) (backend.Process, error) {
	p, err := s.sb.Start(ctx, c.Args, execOptions(c, nil))
	if err != nil {
		return nil, err
	}
	return &process{p: p}, nil
}

// execOptions are the SDK's options of command c, with env before its own.
func execOptions(c backend.Cmd, env []string) gvx.ExecOptions {
	return gvx.ExecOptions{
		Env: append(slices.Clone(env), c.Env...), Dir: c.Dir, User: c.User, Stdin: c.Stdin,
		Stdout: orDiscard(c.Stdout), Stderr: orDiscard(c.Stderr),
		TTY: c.Tty, Cols: c.Cols, Rows: c.Rows, Timeout: c.Timeout,
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// BackendID is the SDK's id of the sandbox (a fork's is not the service's).
func (s *sandbox) BackendID() string { return s.sb.ID() }

// DialPort connects to the guest's TCP port through the sandbox's NAT.
func (s *sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	return s.sb.DialPort(ctx, port)
}

// NarrowEgress replaces the narrowing of the sandbox's NAT's policy.
func (s *sandbox) NarrowEgress(ctx context.Context, n *api.Narrow) error { return narrow(ctx, s.sb, n) }

func (s *sandbox) Pause(ctx context.Context) error  { return s.sb.Pause(ctx) }
func (s *sandbox) Resume(ctx context.Context) error { return s.sb.Resume(ctx) }
func (s *sandbox) Close(ctx context.Context) error  { return s.sb.Close(ctx) }

func (s *sandbox) Stats(ctx context.Context) (backend.Stats, error) {
	st, err := s.sb.Stats(ctx)
	if err != nil {
		return backend.Stats{}, err
	}
	return s.measure(st), nil
}

// cpuMeter turns the SDK's stats into the service's; the CPU share is
// over the time since the last call.
type cpuMeter struct {
	mu      sync.Mutex
	lastCPU uint64
	lastAt  time.Time
}

func (m *cpuMeter) measure(st gvx.Stats) backend.Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := backend.Stats{CPUCount: 1, MemUsed: int64(st.MemoryBytes), MemCache: int64(st.MemoryCache), MemTotal: int64(st.MemoryLimit)}
	now := time.Now()
	if !m.lastAt.IsZero() && st.CPUNanos >= m.lastCPU {
		out.CPUUsedPct = 100 * float64(st.CPUNanos-m.lastCPU) / float64(now.Sub(m.lastAt).Nanoseconds())
	}
	m.lastCPU, m.lastAt = st.CPUNanos, now
	return out
}

// sdkProcess is a command the SDK runs: a sandbox's (gvx.Process) or a
// lease's (gvx.LeaseProcess).
type sdkProcess interface {
	Signal(ctx context.Context, sig syscall.Signal) error
	Resize(ctx context.Context, cols, rows uint32) error
	Wait(ctx context.Context) (gvx.Result, error)
}

type process struct {
	p       sdkProcess
	failure error // what Wait reported as an exit code: a timeout, an OOM kill
}

// Failure is why the process ended, when Wait gave an exit code for it
// (gvx.ErrTimeout, gvx.ErrOOM); nil for a process that exited by itself.
func (p *process) Failure() error { return p.failure }

func (p *process) failed(err error) {
	if errors.Is(err, gvx.ErrTimeout) || errors.Is(err, gvx.ErrOOM) {
		p.failure = err
	}
}

func (p *process) Signal(ctx context.Context, sig syscall.Signal) error {
	err := p.p.Signal(ctx, sig)
	// containerd's "process already finished" (the exit is on its way),
	// or a sandbox gone with its processes.
	if errors.Is(err, gvx.ErrNotFound) || errors.Is(err, gvx.ErrNotRunning) {
		return fmt.Errorf("%w: %w", backend.ErrEnded, err)
	}
	return err
}

func (p *process) Resize(ctx context.Context, cols, rows uint32) error {
	return p.p.Resize(ctx, cols, rows)
}

// Wait returns the exit code; a kill by timeout or by Kill is a code
// (137), not an error.
func (p *process) Wait(ctx context.Context) (int, error) {
	r, err := p.p.Wait(ctx)
	if err != nil && (errors.Is(err, gvx.ErrTimeout) || errors.Is(err, gvx.ErrNotRunning)) && r.ExitCode >= 0 {
		p.failed(err)
		return r.ExitCode, nil
	}
	if err != nil && ctx.Err() == nil && r.ExitCode > 0 {
		p.failed(err)
		return r.ExitCode, nil
	}
	return r.ExitCode, err
}
