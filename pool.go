package gvx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/containerd/v2/client"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/flock"
	poolclient "github.com/gvxrun/gvx/pool/client"
)

// PoolConfig describes a pool: sandboxes of one template kept booted.
type PoolConfig struct {
	// Name identifies the pool in the client's namespace ([a-z0-9]+).
	Name string
	// Template is what every sandbox of the pool is; its ID and stdio are
	// set per Acquire.
	Template Config
	// Size is how many booted sandboxes the pool keeps ready (1–1024).
	Size int
	// Checkpointable: the pool's sandboxes can be checkpointed (Sandbox.
	// Checkpoint, Rollback, Client.Fork). The template's init then runs
	// as a container in a booted sandbox (a plain pool) instead of as a
	// process in the root container of an image pool's, which gVisor's
	// restore could not put back; an acquire also creates that container
	// (its root filesystem and gofer). A template that cannot run as a
	// process (volumes, a terminal, published sockets, a hostname) gets a
	// plain pool anyway.
	Checkpointable bool
	// Leases: the pool serves leases (Pool.Lease) instead of sandboxes
	// (Acquire): the template must be one of an image pool (no terminal,
	// volumes, docker mode, published sockets or hostname; not
	// Checkpointable), and its Env, Cwd, User, Resources and Network apply
	// to the pool's sandboxes as booted.
	Leases bool
}

// AcquireOptions are what differs between sandboxes of one pool.
type AcquireOptions struct {
	ID             string            // default random
	Env            []string          // added to the template's
	Labels         map[string]string // added to the template's
	Stdout, Stderr io.Writer
}

// Pool keeps sandboxes of a template booted ahead of demand: a `gvx pool
// serve` of its own (docs/pool.md), whose sandboxes New adopts instead of
// booting one. A template of an image, with no terminal, volumes, docker
// mode, published sockets or hostname, gets an image pool (unless
// Checkpointable): a sandbox is then handed out with the template's init
// already started as a process in it (create to first exec ≈ 55–70 ms). Each sandbox serves once: Release
// destroys it and the pool boots a fresh one.
type Pool struct {
	c      *Client
	cfg    PoolConfig
	dir    string
	config string
	socket string
	cmd    *exec.Cmd
	exited chan struct{}
	log    syncBuffer
	lock   *os.File // flock'd while the pool lives (<dir>.lock)

	// leaseProc is what a lease pool's commands run as, img its image
	// and users the users of it looked up so far (name → specs.User).
	leaseProc *specs.Process
	img       client.Image
	users     sync.Map

	mu     sync.Mutex
	out    map[*Sandbox]AcquireOptions
	closed bool
}

// NewPool starts a pool and returns once its server answers (its
// sandboxes boot in the background: WaitReady waits for them).
func (c *Client) NewPool(ctx context.Context, pc PoolConfig) (_ *Pool, retErr error) {
	t := pc.Template
	if t.ID == "" {
		t.ID = "template"
	}
	if err := validate(t); err != nil {
		return nil, newError("new pool", pc.Name, ErrInvalid, fmt.Errorf("Template: %w", err))
	}
	if !ValidID(pc.Name) {
		return nil, errorf("new pool", pc.Name, ErrInvalid, "Name %q: use lower-case letters and digits", pc.Name)
	}
	if pc.Size < 1 || pc.Size > 1024 {
		return nil, errorf("new pool", pc.Name, ErrInvalid, "Size %d: want 1 to 1024", pc.Size)
	}
	bin, err := c.binDir()
	if err != nil {
		return nil, err
	}
	img, err := c.resolver().Resolve(c.Context(ctx), t.Image)
	if err != nil {
		return nil, newError("new pool", pc.Name, nil, err)
	}
	p := &Pool{c: c, cfg: pc, dir: filepath.Join(c.opts.StateDir, "pools", c.opts.Namespace, pc.Name), exited: make(chan struct{}), out: map[*Sandbox]AcquireOptions{}}
	p.config, p.socket = filepath.Join(p.dir, "config.toml"), filepath.Join(p.dir, "pool.sock")
	if err := os.MkdirAll(filepath.Dir(p.dir), 0o711); err != nil {
		return nil, newError("new pool", pc.Name, nil, err)
	}
	// The pool's lock, held while it lives (the kernel drops it when the
	// program dies): held by another, the name is in use; free with the
	// directory there, a program ended without closing its pool, whose
	// directory is taken over (its server's successor destroys the
	// sandboxes it left ready).
	lock, err := os.OpenFile(p.dir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, newError("new pool", pc.Name, nil, err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, errorf("new pool", pc.Name, ErrExists, "another pool of this name runs in namespace %s (it holds %s.lock)", c.opts.Namespace, p.dir)
	}
	p.lock = lock
	defer func() {
		if retErr != nil {
			p.unlock()
		}
	}()
	if _, err := os.Stat(p.dir); err == nil {
		c.progressf("pool %s: taking over %s, left by a program that ended without closing its pool", pc.Name, p.dir)
		if err := os.RemoveAll(p.dir); err != nil {
			return nil, newError("new pool", pc.Name, nil, err)
		}
	}
	if err := os.Mkdir(p.dir, 0o711); err != nil {
		return nil, newError("new pool", pc.Name, nil, err)
	}
	defer func() {
		if retErr != nil {
			_ = p.stop()
			_ = os.RemoveAll(p.dir)
		}
	}()
	rc := c.cfg
	rc.Pool.Size, rc.Pool.Socket = pc.Size, p.socket
	rc.Docker.Enabled = t.Docker
	rc.Resources.MemoryBytes, rc.Resources.CPUMillis = t.Resources.MemoryBytes, t.Resources.CPUMillis
	rc.SentryFlags = append(slices.Clone(rc.SentryFlags), sandboxFlags(c.cfg, t)...)
	if t.Network == NetworkNAT {
		// The pool boots NAT sandboxes with the template's NAT, which
		// its acquires then share (the shim's adoption compares them).
		rc.Network = api.NetworkNAT
		if t.NAT != nil {
			if t.NAT.narrows() {
				return nil, errorf("new pool", pc.Name, ErrInvalid, "Template.NAT narrows the egress policy: a pool's sandboxes boot with one policy; set it with EgressDefault, EgressAllow and EgressDeny")
			}
			rc.NAT = t.NAT.config(rc.NAT)
		}
	}
	if t.Resources.DiskBytes > 0 {
		// The pool boots its sandboxes with the template's root
		// filesystem cap (the shim lets a task adopt only such a sandbox).
		rc.SentryFlags = append(rc.SentryFlags, api.RootfsSizeFlag(t.Resources.DiskBytes))
		// And a lease root's writes (its tmpfs) are capped alike.
		rc.Resources.RootfsBytes = t.Resources.DiskBytes
	}
	if pc.Leases && (!imagePoolable(t) || rc.RootfsOverlay != "memory" || pc.Checkpointable) {
		return nil, errorf("new pool", pc.Name, ErrInvalid, "Leases: a lease pool's template has no terminal, mounts, docker mode, published sockets or hostname, is not Checkpointable, and the config's rootfs_overlay is \"memory\"")
	}
	rc.Pool.Lease = pc.Leases
	if pc.Leases {
		p.img = img
		if p.leaseProc, err = c.leaseProcess(ctx, t, img); err != nil {
			return nil, newError("new pool", pc.Name, ErrInvalid, err)
		}
	}
	if imagePoolable(t) && rc.RootfsOverlay == "memory" && !pc.Checkpointable {
		rc.Pool.Image, rc.Pool.Containerd, rc.Pool.Namespace, rc.Pool.Snapshotter = img.Name(), c.opts.Containerd, c.opts.Namespace, c.opts.Snapshotter
	}
	body, err := encodeConfig(rc)
	if err != nil {
		return nil, newError("new pool", pc.Name, ErrInvalid, err)
	}
	if err := os.WriteFile(p.config, body, 0o644); err != nil {
		return nil, newError("new pool", pc.Name, nil, err)
	}
	p.cmd = exec.Command(filepath.Join(bin, api.CLIBinary), "pool", "serve", "--config", p.config)
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	// Its own process group (a terminal's Ctrl-C is the program's to
	// handle), and SIGTERM if the program dies first: the server then
	// destroys the sandboxes it has ready.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := p.cmd.Start(); err != nil {
		return nil, errorf("new pool", pc.Name, ErrUnavailable, "start gvx pool serve: %w", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	c.progressf("pool %s: %d sandboxes of %s", pc.Name, pc.Size, t.Image)
	for {
		if _, err := poolclient.Query(ctx, p.socket); err == nil {
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, errorf("new pool", pc.Name, ErrUnavailable, "gvx pool serve exited at start: %s", p.log.Bytes())
		case <-ctx.Done():
			return nil, newError("new pool", pc.Name, nil, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// imagePoolable reports whether sandboxes of t can start as a process in
// an image pool's sandbox (pool/adopt.ProcessBlocker).
func imagePoolable(t Config) bool {
	return !t.TTY && len(t.Mounts) == 0 && !t.Docker && len(t.Publish) == 0 && t.Hostname == ""
}

// Acquire returns a sandbox of the pool's template: a booted one from
// the pool, or, when none is ready, one booted now.
func (p *Pool) Acquire(ctx context.Context, o AcquireOptions) (*Sandbox, error) {
	if p.cfg.Leases {
		return nil, errorf("acquire from pool", p.cfg.Name, ErrInvalid, "a pool of PoolConfig.Leases hands out leases: use Lease")
	}
	if p.isClosed() {
		return nil, newError("acquire from pool", p.cfg.Name, ErrClosed, nil)
	}
	cfg := p.cfg.Template
	cfg.ID, cfg.Stdout, cfg.Stderr = o.ID, o.Stdout, o.Stderr
	cfg.Env = append(slices.Clone(cfg.Env), o.Env...)
	if len(o.Labels) > 0 {
		l := map[string]string{}
		for k, v := range cfg.Labels {
			l[k] = v
		}
		for k, v := range o.Labels {
			l[k] = v
		}
		cfg.Labels = l
	}
	sb, err := p.c.newSandbox(ctx, cfg, &runtimeoptions.Options{ConfigPath: p.config}, p.cfg.Name)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.out[sb] = o
	p.mu.Unlock()
	sb.onClose = func(context.Context) error {
		p.mu.Lock()
		delete(p.out, sb)
		p.mu.Unlock()
		return nil
	}
	return sb, nil
}

// isClosed reports whether Stop or Close ran.
func (p *Pool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Release closes a sandbox of the pool (sandboxes serve once).
func (p *Pool) Release(ctx context.Context, sb *Sandbox) error { return sb.Close(ctx) }

// Reset closes sb and acquires a fresh sandbox with the same id and
// options.
func (p *Pool) Reset(ctx context.Context, sb *Sandbox) (*Sandbox, error) {
	p.mu.Lock()
	o, ok := p.out[sb]
	p.mu.Unlock()
	if !ok {
		return nil, errorf("reset", sb.ID(), ErrInvalid, "not a sandbox of pool %s (or already released)", p.cfg.Name)
	}
	o.ID = sb.ID()
	if err := sb.Close(ctx); err != nil {
		return nil, err
	}
	return p.Acquire(ctx, o)
}

// Socket is where the pool's server answers (package pool/client's
// protocol: its Query, ClaimLease).
func (p *Pool) Socket() string { return p.socket }

// Log is what the pool's server has written so far (its boots, claims
// and errors).
func (p *Pool) Log() string { return string(p.log.Bytes()) }

// PoolStatus is a pool's fill level.
type PoolStatus struct {
	Size, Ready int
	// Booted, Claimed and Reset (sandboxes taken back and verified
	// back into the pool) count since the pool started.
	Booted, Claimed, Reset int
	// Image is set for an image pool.
	Image string
}

// Status asks the pool's server how full it is.
func (p *Pool) Status(ctx context.Context) (PoolStatus, error) {
	st, err := poolclient.Query(ctx, p.socket)
	if err != nil {
		return PoolStatus{}, newError("pool status", p.cfg.Name, ErrUnavailable, err)
	}
	return PoolStatus{Size: st.Size, Ready: st.Ready, Booted: st.Booted, Claimed: st.Claimed, Reset: st.Reset, Image: st.Image}, nil
}

// WaitReady waits until n sandboxes are ready.
func (p *Pool) WaitReady(ctx context.Context, n int) error {
	for {
		st, err := p.Status(ctx)
		if err == nil && st.Ready >= n {
			return nil
		}
		select {
		case <-p.exited:
			return errorf("pool", p.cfg.Name, ErrUnavailable, "gvx pool serve exited: %s", p.log.Bytes())
		case <-ctx.Done():
			return newError("pool", p.cfg.Name, nil, fmt.Errorf("%d of %d ready: %w", st.Ready, n, ctx.Err()))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Stop stops the pool's server (which destroys the sandboxes it has
// ready) and removes its files; sandboxes acquired from it run on, each
// its own, until closed. Acquire fails after Stop.
func (p *Pool) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	var errs []error
	if err := p.stop(); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(p.dir); err != nil {
		errs = append(errs, err)
	}
	p.unlock()
	if err := errors.Join(errs...); err != nil {
		return newError("stop pool", p.cfg.Name, nil, err)
	}
	return nil
}

// unlock removes and releases the pool's lock file.
func (p *Pool) unlock() {
	if p.lock != nil {
		_ = os.Remove(p.lock.Name())
		_ = flock.Close(p.lock)
		p.lock = nil
	}
}

// Close closes the sandboxes acquired from the pool and still open, and
// stops the pool (Stop).
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	var open []*Sandbox
	for sb := range p.out {
		open = append(open, sb)
	}
	p.mu.Unlock()
	var errs []error
	for _, sb := range open {
		if err := sb.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := p.Stop(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// stop ends the pool server: SIGTERM, SIGKILL after a minute.
func (p *Pool) stop() error {
	if p.cmd == nil || p.cmd.Process == nil {
		return nil
	}
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("gvx pool serve did not stop within a minute of SIGTERM: %s", p.log.Bytes())
	}
}
