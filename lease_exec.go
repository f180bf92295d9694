package gvx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/console"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sandbox"
)

// LeaseProcess is a command running in a lease (Lease.Start).
type LeaseProcess struct {
	l       *Lease
	proc    *sandbox.RootProcess
	name    string // argv[0], for messages
	started time.Time
	timeout time.Duration
	pty     console.Console // the terminal's host side (TTY), else nil
	stdin   *os.File        // the pipe's write end (not with TTY)
	stdinMu sync.Mutex
	outs    []*os.File // our read ends (TTY: none, pty is read)
	copies  sync.WaitGroup
	stdout  *syncBuffer
	stderr  *syncBuffer
	exit    chan leaseExit
	killed  chan struct{} // closed by Kill, a timeout or the context
	kill    sync.Once
	why     error // set before killed closes
	done    chan struct{}
	result  Result
	err     error
}

type leaseExit struct {
	ws  syscall.WaitStatus
	err error
}

// Exec runs cmd in the lease and waits for it: a non-zero exit is not an
// error. When ctx ends or the timeout passes the command is killed with
// what it started in its process group (anything else it started runs
// on until Release: a lease's reset kills everything).
// ExecOptions are as for Sandbox.Exec: User is a name or uid of the
// template's image (names are looked up in the image's /etc/passwd and
// /etc/group, not in what the lease wrote); without User the command runs
// as the template's user (Config.User, else the image's).
func (l *Lease) Exec(ctx context.Context, cmd []string, o ExecOptions) (Result, error) {
	p, err := l.Start(ctx, cmd, o)
	if err != nil {
		return Result{ExitCode: -1}, err
	}
	return p.Wait(context.WithoutCancel(ctx))
}

// Start starts cmd in the lease and returns at once; output streams to
// ExecOptions' writers (collected into the Result without them). The
// command starts in the sandbox through its control socket: no host
// process is started for it. With TTY it runs on a terminal of
// Cols×Rows (its output is Stdout's; Resize changes the size).
func (l *Lease) Start(ctx context.Context, cmd []string, o ExecOptions) (_ *LeaseProcess, retErr error) {
	if len(cmd) == 0 {
		return nil, errorf("exec in", l.ID(), ErrInvalid, "no command")
	}
	for _, kv := range o.Env {
		if !strings.Contains(kv, "=") {
			return nil, errorf("exec in", l.ID(), ErrInvalid, "Env %q: want KEY=VALUE", kv)
		}
	}
	tp := l.p.leaseProc
	user := tp.User
	if o.User != "" {
		u, err := l.p.user(ctx, o.User)
		if err != nil {
			return nil, newError("exec in", l.ID(), ErrInvalid, err)
		}
		user = u
	}
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil, newError("exec in", l.ID(), ErrClosed, errors.New("the lease was released"))
	}
	l.running.Add(1)
	l.mu.Unlock()
	p := &LeaseProcess{l: l, name: cmd[0], timeout: o.Timeout, exit: make(chan leaseExit, 1), killed: make(chan struct{}), done: make(chan struct{})}
	var files []*os.File // the sandbox's ends: closed once it has its copies
	defer func() {
		for _, f := range files {
			f.Close()
		}
		if retErr != nil {
			p.closeOurs()
			l.running.Done()
		}
	}()
	stdout, stderr := o.Stdout, o.Stderr
	if stdout == nil {
		p.stdout = &syncBuffer{}
		stdout = p.stdout
	}
	if stderr == nil && !o.TTY {
		p.stderr = &syncBuffer{}
		stderr = p.stderr
	}
	if o.TTY {
		pty, path, err := console.NewPty()
		if err != nil {
			return nil, newError("exec in", l.ID(), nil, fmt.Errorf("terminal: %w", err))
		}
		p.pty = pty
		if o.Cols > 0 && o.Rows > 0 {
			if err := pty.Resize(console.WinSize{Width: uint16(o.Cols), Height: uint16(o.Rows)}); err != nil {
				return nil, newError("exec in", l.ID(), nil, fmt.Errorf("terminal size: %w", err))
			}
		}
		replica, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY, 0)
		if err != nil {
			return nil, newError("exec in", l.ID(), nil, fmt.Errorf("terminal: %w", err))
		}
		files = append(files, replica, replica, replica)
	} else {
		if o.Stdin != nil {
			r, w, err := os.Pipe()
			if err != nil {
				return nil, newError("exec in", l.ID(), nil, err)
			}
			files, p.stdin = append(files, r), w
		} else {
			null, err := os.Open(os.DevNull)
			if err != nil {
				return nil, newError("exec in", l.ID(), nil, err)
			}
			files = append(files, null)
		}
		for range 2 {
			r, w, err := os.Pipe()
			if err != nil {
				return nil, newError("exec in", l.ID(), nil, err)
			}
			files, p.outs = append(files, w), append(p.outs, r)
		}
	}
	dir := tp.Cwd
	if o.Dir != "" {
		dir = o.Dir
	}
	proc, err := l.runner.Start(sandbox.RootExec{Argv: cmd, Env: append(slices.Clone(tp.Env), o.Env...), Dir: dir,
		User: &user, Caps: leaseCaps, Stdio: files, TTY: o.TTY})
	if err != nil {
		kind := error(nil)
		if strings.Contains(err.Error(), "no such file or directory") || strings.Contains(err.Error(), "executable file not found") {
			kind = ErrNotFound
			err = fmt.Errorf("%s: %w (is it in the image, on its PATH?)", cmd[0], err)
		}
		return nil, newError("exec in", l.ID(), kind, err)
	}
	p.proc, p.started = proc, time.Now()
	// The output: a terminal's, or the two pipes'.
	if p.pty != nil {
		p.copies.Add(1)
		go func() { defer p.copies.Done(); _, _ = io.Copy(stdout, p.pty) }()
		if o.Stdin != nil {
			go func() { _, _ = io.Copy(p.pty, o.Stdin) }()
		}
	} else {
		for i, sink := range []io.Writer{stdout, stderr} {
			p.copies.Add(1)
			go func() { defer p.copies.Done(); _, _ = io.Copy(sink, p.outs[i]) }()
		}
		if o.Stdin != nil {
			go func() { _, _ = io.Copy(p.stdin, o.Stdin); p.closeStdin() }()
		}
	}
	go func() { ws, err := proc.Wait(); p.exit <- leaseExit{ws, err} }()
	l.mu.Lock()
	if l.procs == nil {
		l.procs = map[*LeaseProcess]struct{}{}
	}
	l.procs[p] = struct{}{}
	released := l.released
	l.mu.Unlock()
	if released {
		p.terminate(newError("exec in", l.ID(), ErrClosed, errors.New("the lease was released")))
	}
	go p.run(ctx)
	return p, nil
}

// run waits for the process's exit, killing it when its context ends, its
// timeout passes or Kill asks, and records its result.
func (p *LeaseProcess) run(ctx context.Context) {
	defer close(p.done)
	defer p.l.running.Done()
	defer func() {
		p.l.mu.Lock()
		delete(p.l.procs, p)
		p.l.mu.Unlock()
	}()
	var timeout <-chan time.Time
	if p.timeout > 0 {
		t := time.NewTimer(p.timeout)
		defer t.Stop()
		timeout = t.C
	}
	var w leaseExit
	select {
	case w = <-p.exit:
	case <-ctx.Done():
		p.terminate(newError("exec in", p.l.ID(), nil, ctx.Err()))
	case <-timeout:
		p.terminate(errorf("exec in", p.l.ID(), ErrTimeout, "%s: killed after its %s timeout", p.name, p.timeout))
	case <-p.killed:
	}
	if p.why != nil {
		select {
		case w = <-p.exit:
		case <-time.After(10 * time.Second):
			p.proc.Close() // ends the Wait
			w = <-p.exit
		}
	}
	p.proc.Close()
	// Output left in the pipes, for up to a second after the exit (a
	// process the command left running may hold them).
	copied := make(chan struct{})
	go func() { p.copies.Wait(); close(copied) }()
	select {
	case <-copied:
	case <-time.After(time.Second):
		p.closeOurs()
		<-copied
	}
	p.closeOurs()
	p.result = Result{ExitCode: api.ExitCode(w.ws), Duration: time.Since(p.started)}
	if p.stdout != nil {
		p.result.Stdout = p.stdout.Bytes()
	}
	if p.stderr != nil {
		p.result.Stderr = p.stderr.Bytes()
	}
	switch {
	case p.why != nil:
		p.err = p.why
	case w.err != nil:
		p.result.ExitCode = -1
		p.err = newError("exec in", p.l.ID(), ErrUnavailable, w.err)
	}
}

// terminate kills the process and its process group — what it started,
// unless that left the group — (once) for why.
func (p *LeaseProcess) terminate(why error) {
	p.kill.Do(func() {
		p.why = why
		if err := p.proc.SignalGroup(unix.SIGKILL); err != nil {
			_ = p.proc.Signal(unix.SIGKILL)
		}
		close(p.killed)
	})
}

// closeOurs closes our ends of the process's stdio.
func (p *LeaseProcess) closeOurs() {
	for _, f := range p.outs {
		f.Close()
	}
	if p.pty != nil {
		p.pty.Close()
	}
	p.closeStdin()
}

func (p *LeaseProcess) closeStdin() {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
}

// Pid is the process's pid in the sandbox.
func (p *LeaseProcess) Pid() int { return int(p.proc.Pid()) }

// Wait waits for the process to end and its output to be written. A
// non-zero exit is not an error; a kill by timeout is ErrTimeout (137);
// an ended context of Start's its error. If ctx ends first, Wait
// returns its error and the process runs on.
func (p *LeaseProcess) Wait(ctx context.Context) (Result, error) {
	select {
	case <-p.done:
		return p.result, p.err
	case <-ctx.Done():
		return Result{ExitCode: -1}, newError("wait for", p.l.ID(), nil, ctx.Err())
	}
}

// Done is closed when the process has ended and Wait returns at once.
func (p *LeaseProcess) Done() <-chan struct{} { return p.done }

// Kill kills the process and what it started in its process group (the
// release kills the rest) and waits until it is gone; Wait then returns
// ErrNotRunning.
func (p *LeaseProcess) Kill(ctx context.Context) error {
	p.terminate(errorf("exec in", p.l.ID(), ErrNotRunning, "%s was killed", p.name))
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return newError("kill", p.l.ID(), nil, ctx.Err())
	}
}

// Signal sends sig to the process; ErrNotRunning once it has ended.
func (p *LeaseProcess) Signal(ctx context.Context, sig syscall.Signal) error {
	select {
	case <-p.done:
		return errorf("signal", p.l.ID(), ErrNotRunning, "%s has ended", p.name)
	default:
	}
	if err := p.proc.Signal(unix.Signal(sig)); err != nil {
		return newError("signal", p.l.ID(), nil, err)
	}
	return nil
}

// Resize sets the size of the process's terminal (ErrInvalid without
// one). The command sees it at its next look (stty size, TIOCGWINSZ).
func (p *LeaseProcess) Resize(ctx context.Context, cols, rows uint32) error {
	if p.pty == nil {
		return errorf("resize", p.l.ID(), ErrInvalid, "%s has no terminal (ExecOptions.TTY)", p.name)
	}
	if err := p.pty.Resize(console.WinSize{Width: uint16(cols), Height: uint16(rows)}); err != nil {
		return newError("resize", p.l.ID(), nil, err)
	}
	return nil
}

// CloseStdin closes the process's standard input (the copy from
// ExecOptions.Stdin ends): it reads EOF. A terminal has no EOF to give:
// there it is a no-op.
func (p *LeaseProcess) CloseStdin(ctx context.Context) error {
	p.closeStdin()
	return nil
}
