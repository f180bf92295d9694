package gvx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
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
	running  sync.WaitGroup
}

// leaseProcess is what a lease's commands run as: the template's
// environment, directory and user over its image's (the pool's sandboxes
// boot gvx-pause, whose own process says nothing of the image). A user
// must be numeric (uid[:gid]): a name would be looked up in files the
// pool's server has not mounted yet.
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
		u, g, _ := strings.Cut(name, ":")
		uid, uerr := strconv.ParseUint(u, 10, 32)
		gid, gerr := strconv.ParseUint(g, 10, 32)
		if g == "" {
			gid, gerr = 0, nil
		}
		if uerr != nil || gerr != nil {
			return nil, fmt.Errorf("user %q: a lease pool's user must be numeric (uid[:gid])", name)
		}
		p.User = specs.User{UID: uint32(uid), GID: uint32(gid)}
	}
	return p, nil
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

// Exec runs cmd in the lease and waits for it: a non-zero exit is not an
// error. Env, Dir, Stdin, Stdout, Stderr and Timeout are as for
// Sandbox.Exec (at the timeout or the context's end the command is
// killed; what it started runs on until Release); User and TTY are not
// supported (the command runs as the template's user, with its
// environment and directory: Config.User, Env and Workdir over the
// image's).
func (l *Lease) Exec(ctx context.Context, cmd []string, o ExecOptions) (Result, error) {
	switch {
	case len(cmd) == 0:
		return Result{}, errorf("exec in", l.ID(), ErrInvalid, "no command")
	case o.User != "":
		return Result{}, errorf("exec in", l.ID(), ErrInvalid, "User %q: a lease's commands run as the template's user (Config.User)", o.User)
	case o.TTY:
		return Result{}, errorf("exec in", l.ID(), ErrInvalid, "TTY: a lease's commands have no terminal")
	}
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return Result{}, newError("exec in", l.ID(), ErrClosed, errors.New("the lease was released"))
	}
	l.running.Add(1)
	l.mu.Unlock()
	defer l.running.Done()

	var files, mine []*os.File // the sandbox's ends, and ours
	defer func() {
		for _, f := range append(files, mine...) {
			f.Close()
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			mine = append(mine, r, w)
		}
		return r, w, err
	}
	var stdinW *os.File
	if o.Stdin != nil {
		r, w, err := pipe()
		if err != nil {
			return Result{}, newError("exec in", l.ID(), nil, err)
		}
		files, stdinW = append(files, r), w
	} else {
		null, err := os.Open(os.DevNull)
		if err != nil {
			return Result{}, newError("exec in", l.ID(), nil, err)
		}
		files = append(files, null)
	}
	var outs [2]*os.File
	for i := range outs {
		r, w, err := pipe()
		if err != nil {
			return Result{}, newError("exec in", l.ID(), nil, err)
		}
		files, outs[i] = append(files, w), r
	}
	started := time.Now()
	tp := l.p.leaseProc
	dir := tp.Cwd
	if o.Dir != "" {
		dir = o.Dir
	}
	proc, err := l.runner.Start(sandbox.RootExec{Argv: cmd, Env: append(slices.Clone(tp.Env), o.Env...), Dir: dir, User: &tp.User, Caps: leaseCaps, Stdio: files})
	// The sandbox has its copies: our write ends must go for the output
	// to end with the command.
	for _, f := range files {
		f.Close()
	}
	files = nil
	if err != nil {
		return Result{}, newError("exec in", l.ID(), nil, err)
	}
	defer proc.Close()
	var stdout, stderr syncBuffer
	sinks := [2]io.Writer{o.Stdout, o.Stderr}
	if sinks[0] == nil {
		sinks[0] = &stdout
	}
	if sinks[1] == nil {
		sinks[1] = &stderr
	}
	var copies sync.WaitGroup
	for i := range outs {
		copies.Add(1)
		go func() { defer copies.Done(); _, _ = io.Copy(sinks[i], outs[i]) }()
	}
	if stdinW != nil {
		go func() { _, _ = io.Copy(stdinW, o.Stdin); stdinW.Close() }()
	}

	type waited struct {
		ws  syscall.WaitStatus
		err error
	}
	done := make(chan waited, 1)
	go func() { ws, err := proc.Wait(); done <- waited{ws, err} }()
	var timeout <-chan time.Time
	if o.Timeout > 0 {
		t := time.NewTimer(o.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var why error
	var w waited
	select {
	case w = <-done:
	case <-ctx.Done():
		why = newError("exec in", l.ID(), nil, ctx.Err())
	case <-timeout:
		why = errorf("exec in", l.ID(), ErrTimeout, "%s: killed after its %s timeout", cmd[0], o.Timeout)
	}
	if why != nil {
		_ = proc.Signal(unix.SIGKILL)
		select {
		case w = <-done:
		case <-time.After(10 * time.Second):
			proc.Close()
			w = <-done
		}
	}
	// Output left in the pipes, for up to a second after the exit (a
	// process the command left running may hold them).
	copied := make(chan struct{})
	go func() { copies.Wait(); close(copied) }()
	select {
	case <-copied:
	case <-time.After(time.Second):
		for _, f := range outs {
			f.Close()
		}
		<-copied
	}
	res := Result{ExitCode: api.ExitCode(w.ws), Duration: time.Since(started), Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	if o.Stdout != nil {
		res.Stdout = nil
	}
	if o.Stderr != nil {
		res.Stderr = nil
	}
	switch {
	case why != nil:
		return res, why
	case w.err != nil:
		return res, newError("exec in", l.ID(), ErrUnavailable, w.err)
	}
	return res, nil
}

// Release hands the sandbox back to its pool (waiting for commands under
// way to end: cancel their contexts first). Releasing twice is a no-op.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	l.mu.Unlock()
	l.running.Wait()
	if _, err := l.l.Release(ctx); err != nil {
		return newError("release lease", l.ID(), ErrUnavailable, err)
	}
	return nil
}
