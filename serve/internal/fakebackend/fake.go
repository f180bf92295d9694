// Package fakebackend is a backend for the serve packages' unit tests.
//
// Its sandboxes run commands as host processes (real bash, coreutils and
// findutils, so envd's scripts are exercised for real) and ignore users;
// only tests import it.
package fakebackend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/serve/backend"
)

type execCmd = exec.Cmd

// Backend holds fake sandboxes.
type Backend struct {
	mu    sync.Mutex
	boxes map[string]*Sandbox
	// CreateDelay is how long a create takes; FailCreate makes it fail.
	CreateDelay time.Duration
	FailCreate  error
	Creates     int
	// FailCheckpoint makes checkpoints fail, FailExec execs, FailNarrow
	// NarrowEgress.
	FailCheckpoint error
	FailExec       error
	FailNarrow     error
	// FailDestroys is how many Destroy calls fail from now on;
	// DestroyDelay is how long each takes.
	FailDestroys int
	DestroyDelay time.Duration
	// Ports are the fake guests' TCP ports: DialPort(port) connects to
	// Ports[port] (an address of the test's).
	Ports map[int]string
	// Hot are ids a create hands over (the first, then the next) instead
	// of making a sandbox under the id it is given, as gvxbackend's hot
	// sandboxes: the sandbox's BackendID is the hot id.
	Hot []string
	cks map[string]checkpoint
	seq int
}

// New makes an empty fake backend.
func New() *Backend { return &Backend{boxes: map[string]*Sandbox{}} }

// Sandbox is a fake sandbox.
type Sandbox struct {
	b   *Backend
	ID  string
	Env []string
	// Narrow is the narrowing of the template's egress policy (the
	// create's, or NarrowEgress's), Narrowed how many NarrowEgress calls
	// set it.
	Narrow   *api.Narrow
	Narrowed int
	// Lineage is the sandbox its checkpoint tree started with (a fork's
	// parent; "" for ID), Parent its last checkpoint, Rollbacks how many
	// it had.
	Lineage   string
	Parent    string
	Rollbacks int
	mu        sync.Mutex
	paused    bool
	closed    bool
	procs     map[*execCmd]bool
}

// Create makes a fake sandbox.
func (b *Backend) Create(ctx context.Context, id string, t backend.Template, o backend.CreateOptions) (backend.Sandbox, error) {
	time.Sleep(b.CreateDelay)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.Creates++
	if b.FailCreate != nil {
		return nil, b.FailCreate
	}
	if len(b.Hot) > 0 {
		id, b.Hot = b.Hot[0], b.Hot[1:]
	}
	if _, ok := b.boxes[id]; ok {
		return nil, fmt.Errorf("sandbox %s exists", id)
	}
	s := &Sandbox{b: b, ID: id, Env: append(append([]string(nil), t.Env...), o.Env...), Narrow: o.Narrow, procs: map[*execCmd]bool{}}
	b.boxes[id] = s
	return s, nil
}

// DialPort connects to Backend.Ports[port] (a test's server), as a NAT
// would to the guest's port.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	s.b.mu.Lock()
	addr, ok := s.b.Ports[port]
	s.b.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("guest port %d: connection refused", port)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// NarrowEgress records n (Backend.FailNarrow fails it).
func (s *Sandbox) NarrowEgress(_ context.Context, n *api.Narrow) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if s.b.FailNarrow != nil {
		return s.b.FailNarrow
	}
	s.Narrow = n
	s.Narrowed++
	return nil
}

// Attach finds a fake sandbox.
func (b *Backend) Attach(_ context.Context, id string, _ backend.Template) (backend.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.boxes[id]
	if !ok {
		return nil, backend.ErrNotFound
	}
	return s, nil
}

// Destroy removes a fake sandbox.
func (b *Backend) Destroy(ctx context.Context, id string) error {
	b.mu.Lock()
	delay := b.DestroyDelay
	b.mu.Unlock()
	time.Sleep(delay)
	b.mu.Lock()
	s := b.boxes[id]
	if b.FailDestroys > 0 {
		b.FailDestroys--
		b.mu.Unlock()
		return errors.New("fake: destroy failed (FailDestroys)")
	}
	b.mu.Unlock()
	if s != nil {
		return s.Close(ctx)
	}
	return nil
}

// DestroysToFail is how many of FailDestroys are still to come.
func (b *Backend) DestroysToFail() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.FailDestroys
}

// List lists the fake sandboxes.
func (b *Backend) List(context.Context) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for id := range b.boxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}

// Has says whether sandbox id exists.
func (b *Backend) Has(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.boxes[id]
	return ok
}

// Get returns sandbox id.
func (b *Backend) Get(id string) *Sandbox {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.boxes[id]
}

// Close does nothing.
func (b *Backend) Close() error { return nil }

// BackendID is the sandbox's ID.
func (s *Sandbox) BackendID() string { return s.ID }

// Paused says whether the sandbox is paused.
func (s *Sandbox) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

// Exec runs c as a host process.
func (s *Sandbox) Exec(ctx context.Context, c backend.Cmd) (backend.Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, backend.ErrNotFound
	}
	if s.b.FailExec != nil {
		return nil, s.b.FailExec
	}
	if s.paused {
		return nil, errors.New("sandbox is paused")
	}
	cancel := func() {}
	if c.Timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
	}
	cmd := exec.CommandContext(ctx, c.Args[0], c.Args[1:]...)
	cmd.Env = append(append(os.Environ(), s.Env...), c.Env...)
	if st, err := os.Stat(c.Dir); err == nil && st.IsDir() {
		cmd.Dir = c.Dir
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, err
	}
	s.procs[cmd] = true
	return &proc{s: s, cmd: cmd, cancel: cancel}, nil
}

type proc struct {
	s      *Sandbox
	cmd    *exec.Cmd
	cancel context.CancelFunc
}

func (p *proc) Signal(_ context.Context, sig syscall.Signal) error {
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

func (p *proc) Resize(context.Context, uint32, uint32) error { return backend.ErrUnsupported }

func (p *proc) Wait(context.Context) (int, error) {
	err := p.cmd.Wait()
	p.cancel()
	p.s.mu.Lock()
	delete(p.s.procs, p.cmd)
	p.s.mu.Unlock()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	if err != nil {
		return -1, err
	}
	return 0, nil
}

// Pause marks the sandbox paused (its processes get SIGSTOP).
func (s *Sandbox) Pause(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = true
	for c := range s.procs {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGSTOP)
	}
	return nil
}

// Resume undoes Pause.
func (s *Sandbox) Resume(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = false
	for c := range s.procs {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGCONT)
	}
	return nil
}

// Stats reports constant use.
func (s *Sandbox) Stats(context.Context) (backend.Stats, error) {
	return backend.Stats{CPUCount: 1, MemUsed: 1 << 20, MemTotal: 512 << 20}, nil
}

// Close kills the sandbox's processes and forgets it.
func (s *Sandbox) Close(context.Context) error {
	s.mu.Lock()
	s.closed = true
	for c := range s.procs {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGCONT)
	}
	s.mu.Unlock()
	s.b.mu.Lock()
	delete(s.b.boxes, s.ID)
	s.b.mu.Unlock()
	return nil
}
