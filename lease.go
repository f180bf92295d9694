package gvx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/log"
	"github.com/opencontainers/image-spec/identity"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/cgroups"
	poolclient "github.com/gvxrun/gvx/pool/client"
	"github.com/gvxrun/gvx/sandbox"
)

// Lease is a sandbox of a lease pool (PoolConfig.Leases), held from
// Pool.Lease to Release. Its commands run in the sandbox's root
// container, in a root filesystem of the lease's own (the image's files;
// what the commands write stays in the sandbox's memory), started through
// the sandbox's control socket: a lease starts no host process, neither
// containerd's nor gvx's. Release hands the sandbox back: the pool's
// server kills every process the lease left, drops its files, verifies
// the sandbox is as booted and offers it to the next lease (or destroys
// it). A program that dies holding a lease hands it back the same way.
type Lease struct {
	p      *Pool
	l      *poolclient.Lease
	runner *sandbox.RootRunner

	mu       sync.Mutex
	released bool
	paused   bool
	procs    map[*LeaseProcess]struct{} // started, not yet ended
	running  sync.WaitGroup
}

// leaseProcess is what a lease's commands run as: the template's
// environment, directory and user over its image's (the pool's sandboxes
// boot gvx-pause, whose own process says nothing of the image).
func (c *Client) leaseProcess(ctx context.Context, t Config, img client.Image) (*specs.Process, error) {
	ispec, err := img.Spec(c.Context(ctx))
	if err != nil {
		return nil, fmt.Errorf("the image's config: %w", err)
	}
	ic := ispec.Config
	p := &specs.Process{Env: ic.Env, Cwd: ic.WorkingDir}
	if len(p.Env) == 0 {
		p.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	p.Env = append(slices.Clone(p.Env), t.Env...)
	if t.Workdir != "" {
		p.Cwd = t.Workdir
	}
	if p.Cwd == "" {
		p.Cwd = "/"
	}
	name := ic.User
	if t.User != "" {
		name = t.User
	}
	if name != "" {
		if p.User, err = c.imageUser(ctx, img, name); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// imageUser resolves user name (a name or uid, with an optional :group
// or :gid) in img's /etc/passwd and /etc/group, read from a view of its
// unpacked snapshot; "uid:gid" needs no files.
func (c *Client) imageUser(ctx context.Context, img client.Image, name string) (specs.User, error) {
	if u, g, ok := strings.Cut(name, ":"); ok {
		uid, uerr := strconv.ParseUint(u, 10, 32)
		gid, gerr := strconv.ParseUint(g, 10, 32)
		if uerr == nil && gerr == nil {
			return specs.User{UID: uint32(uid), GID: uint32(gid)}, nil
		}
	}
	ctx, done, err := c.ctrd.WithLease(c.Context(ctx))
	if err != nil {
		return specs.User{}, fmt.Errorf("user %q: %w", name, err)
	}
	defer done(context.WithoutCancel(ctx))
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		return specs.User{}, fmt.Errorf("user %q: the image's layers: %w", name, err)
	}
	key := "gvx-user-" + randomSuffix()
	sn := c.ctrd.SnapshotService(c.opts.Snapshotter)
	if _, err := sn.View(ctx, key, identity.ChainID(diffIDs).String()); err != nil {
		return specs.User{}, fmt.Errorf("user %q: a view of the image's files: %w", name, err)
	}
	defer sn.Remove(context.WithoutCancel(ctx), key)
	info := containers.Container{Snapshotter: c.opts.Snapshotter, SnapshotKey: key}
	spec := &oci.Spec{Process: &specs.Process{}, Root: &specs.Root{Path: "rootfs"}, Linux: &specs.Linux{}}
	for _, opt := range []oci.SpecOpts{oci.WithUser(name), oci.WithAdditionalGIDs(name)} {
		if err := opt(ctx, c.ctrd, &info, spec); err != nil {
			return specs.User{}, fmt.Errorf("user %q of image %s: %w", name, img.Name(), err)
		}
	}
	return spec.Process.User, nil
}

// user resolves a user of the lease pool's image (cached).
func (p *Pool) user(ctx context.Context, name string) (specs.User, error) {
	if u, ok := p.users.Load(name); ok {
		return u.(specs.User), nil
	}
	u, err := p.c.imageUser(ctx, p.img, name)
	if err != nil {
		return specs.User{}, err
	}
	p.users.Store(name, u)
	return u, nil
}

// leaseCaps are a lease's commands' capabilities: containerd's default
// set for a container (the sandbox's init, gvx-pause, has more: it resets
// the sandbox).
var leaseCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}

// leaseWait bounds how long Lease waits for a sandbox when every one is
// out.
const leaseWait = time.Minute

// Lease takes a ready sandbox of the pool, waiting for one (up to a
// minute, or ctx) while every sandbox is out or being reset.
func (p *Pool) Lease(ctx context.Context) (*Lease, error) {
	if !p.cfg.Leases {
		return nil, errorf("lease from pool", p.cfg.Name, ErrInvalid, "the pool was made without PoolConfig.Leases")
	}
	if p.isClosed() {
		return nil, newError("lease from pool", p.cfg.Name, ErrClosed, nil)
	}
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	owner := fmt.Sprintf("%s/%d/%s", p.cfg.Name, os.Getpid(), hex.EncodeToString(nonce[:]))
	// Every sandbox out or being reset: wait for one (the pool refills
	// and follows demand), up to leaseWait.
	deadline := time.Now().Add(leaseWait)
	wait := 2 * time.Millisecond
	var l *poolclient.Lease
	for {
		var err error
		l, err = poolclient.ClaimLease(ctx, p.socket, owner)
		if err == nil {
			break
		}
		if !errors.Is(err, poolclient.ErrNoSandbox) || time.Now().After(deadline) {
			kind := ErrUnavailable
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				kind = nil
			}
			return nil, newError("lease from pool", p.cfg.Name, kind, err)
		}
		select {
		case <-ctx.Done():
			return nil, newError("lease from pool", p.cfg.Name, nil, ctx.Err())
		case <-p.exited:
			return nil, errorf("lease from pool", p.cfg.Name, ErrUnavailable, "gvx pool serve exited: %s", p.log.Bytes())
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
	r, err := l.Sandbox.RootRunner()
	if err != nil {
		l.Close()
		return nil, newError("lease from pool", p.cfg.Name, ErrUnavailable, err)
	}
	return &Lease{p: p, l: l, runner: r}, nil
}

// ID is the leased sandbox's id (a pool sandbox's).
func (l *Lease) ID() string { return l.l.Sandbox.ID }

// Pause freezes every process of the lease (the whole sandbox stops);
// Resume thaws them. Pausing a paused lease, or resuming a running one,
// is a no-op. Release resumes a paused lease first.
func (l *Lease) Pause(ctx context.Context) error { return l.setPaused(true) }

// Resume thaws a paused lease.
func (l *Lease) Resume(ctx context.Context) error { return l.setPaused(false) }

func (l *Lease) setPaused(paused bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	op := map[bool]string{true: "pause", false: "resume"}[paused]
	switch {
	case l.released:
		return newError(op, l.ID(), ErrClosed, errors.New("the lease was released"))
	case l.paused == paused:
		return nil
	}
	f := l.runner.Resume
	if paused {
		f = l.runner.Pause
	}
	if err := f(); err != nil {
		return newError(op, l.ID(), ErrUnavailable, err)
	}
	l.paused = paused
	return nil
}

// Stats reads the lease's resource use now: its sandbox's host cgroup
// (gVisor's processes and the guest's together).
func (l *Lease) Stats(ctx context.Context) (Stats, error) {
	u, err := cgroups.ReadUsage(l.l.Sandbox.Cgroup)
	if err != nil {
		return Stats{}, newError("stats", l.ID(), ErrUnavailable, err)
	}
	return Stats{CPUNanos: u.CPUNanos, MemoryBytes: u.MemoryBytes, MemoryCache: u.MemoryCache, MemoryLimit: u.MemoryLimit, Pids: u.Pids}, nil
}

// natSocket is the lease's NAT's control socket (op names the caller).
func (l *Lease) natSocket(op string) (string, error) {
	sb := l.l.Sandbox
	sock := sb.Root.NATControl(sb.ID)
	if _, err := os.Stat(sock); err != nil {
		return "", errorf(op, l.ID(), ErrUnsupported, "the lease's sandbox has no NAT (%v): make the pool's template with Network %q", err, NetworkNAT)
	}
	return sock, nil
}

// DialPort connects to TCP port of a NetworkNAT lease's guest, as
// Sandbox.DialPort does (the guest sees it come from 10.0.2.2).
func (l *Lease) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, errorf("dial port", l.ID(), ErrInvalid, "port %d: want 1 to 65535", port)
	}
	sock, err := l.natSocket("dial port")
	if err != nil {
		return nil, err
	}
	c, err := api.DialNATPort(ctx, sock, uint16(port))
	if err != nil {
		return nil, newError("dial port", l.ID(), nil, err)
	}
	return c, nil
}

// NarrowEgress narrows a NetworkNAT lease's egress policy while it runs,
// as Sandbox.NarrowEgress does (all empty: none). The pool's reset
// takes the narrowing off before the sandbox's next lease.
func (l *Lease) NarrowEgress(ctx context.Context, def string, allow, deny []string) error {
	n, err := narrowing(def, allow, deny)
	if err != nil {
		return newError("narrow egress", l.ID(), ErrInvalid, err)
	}
	sock, err := l.natSocket("narrow egress")
	if err != nil {
		return err
	}
	if err := api.SetNATNarrow(ctx, sock, n); err != nil {
		return newError("narrow egress", l.ID(), nil, err)
	}
	return nil
}

// Release hands the sandbox back to its pool, killing the commands still
// running (their Wait returns ErrClosed; the pool's reset kills what
// they started). Releasing twice is a no-op.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	paused := l.paused
	procs := slices.Collect(maps.Keys(l.procs))
	l.mu.Unlock()
	if paused {
		// Thawed, so that its commands can end and the reset can run.
		if err := l.runner.Resume(); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx: resume lease %s to release it", l.ID())
		}
	}
	for _, p := range procs {
		p.terminate(newError("exec in", l.ID(), ErrClosed, errors.New("the lease was released")))
	}
	l.running.Wait()
	if _, err := l.l.Release(ctx); err != nil {
		return newError("release lease", l.ID(), ErrUnavailable, err)
	}
	return nil
}
