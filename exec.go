package gvx

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ExecOptions say how Exec and Start run a command.
type ExecOptions struct {
	// Env (K=V) is added to the sandbox's init's environment.
	Env []string
	// Dir is the working directory (default the init's).
	Dir string
	// User runs the command (default Config.User, else the image's): a
	// name or uid, with an optional :group or :gid, of the image.
	User string
	// Stdin is the command's standard input (nil: none). Its EOF closes
	// the command's stdin.
	Stdin io.Reader
	// Stdout and Stderr receive the output as it comes. Nil: it is
	// collected into the Result.
	Stdout, Stderr io.Writer
	// TTY runs the command on a terminal of Cols×Rows (its output is
	// Stdout's).
	TTY        bool
	Cols, Rows uint32
	// Timeout, if positive, kills the command (and what it started) after
	// that long; Wait then returns ErrTimeout.
	Timeout time.Duration
}

// Result is a finished command.
type Result struct {
	// ExitCode is its exit status, 128+n for a death by signal n (137
	// after a kill).
	ExitCode int
	// Stdout and Stderr are its output, unless ExecOptions streamed it.
	Stdout, Stderr []byte
	// Duration is from its start to its exit.
	Duration time.Duration
}

// Process is a command running in a sandbox (Start).
type Process struct {
	s       *Sandbox
	id      string
	proc    client.Process
	started time.Time
	timeout time.Duration
	stdout  *syncBuffer
	stderr  *syncBuffer
	stdin   *stdinStream // nil without ExecOptions.Stdin
	exit    <-chan client.ExitStatus
	killed  chan struct{} // closed by Kill, a timeout or the context
	kill    sync.Once
	why     error // ErrTimeout or the context's error, set before killed closes
	done    chan struct{}
	result  Result
	err     error
}

// Exec runs cmd in the sandbox and waits for it: a non-zero exit is not
// an error. When ctx ends or the timeout passes, the command and every
// process it started are killed.
func (s *Sandbox) Exec(ctx context.Context, cmd []string, o ExecOptions) (Result, error) {
	p, err := s.Start(ctx, cmd, o)
	if err != nil {
		return Result{ExitCode: -1}, err
	}
	return p.Wait(context.WithoutCancel(ctx))
}

// Start starts cmd in the sandbox (through containerd's task exec) and
// returns at once; output streams to ExecOptions' writers. The command
// is killed, with every process it started, when ctx ends or the
// timeout passes.
func (s *Sandbox) Start(ctx context.Context, cmd []string, o ExecOptions) (_ *Process, retErr error) {
	if s.curTask() == nil {
		return nil, newError("exec in", s.id, ErrNotRunning, nil)
	}
	if len(cmd) == 0 {
		return nil, errorf("exec in", s.id, ErrInvalid, "no command")
	}
	for _, kv := range o.Env {
		if !strings.Contains(kv, "=") {
			return nil, errorf("exec in", s.id, ErrInvalid, "Env %q: want KEY=VALUE", kv)
		}
	}
	cctx := s.c.Context(ctx)
	spec, err := s.execSpec(cctx, cmd, o)
	if err != nil {
		return nil, err
	}
	id := fmt.Sprintf("e%d-%s", s.execs.Add(1), randomSuffix())
	spec.Env = replaceEnv(spec.Env, "GVX_EXEC="+id)
	p := &Process{s: s, id: id, timeout: o.Timeout, killed: make(chan struct{}), done: make(chan struct{})}
	stdout, stderr := o.Stdout, o.Stderr
	if stdout == nil {
		p.stdout = &syncBuffer{}
		stdout = p.stdout
	}
	if stderr == nil && !o.TTY {
		p.stderr = &syncBuffer{}
		stderr = p.stderr
	}
	// The stdin's EOF closes it once the process has started (or failed
	// to): a CloseIO before the start would find no stdin to close.
	ready := make(chan struct{})
	defer close(ready)
	var stdin io.Reader
	if o.Stdin != nil {
		p.stdin = newStdinStream(o.Stdin, func() error {
			<-ready
			if retErr != nil {
				return nil
			}
			return p.proc.CloseIO(context.WithoutCancel(cctx), client.WithStdinCloser)
		})
		stdin = p.stdin
	}
	opts := []cio.Opt{cio.WithStreams(stdin, stdout, stderr), cio.WithFIFODir(s.c.fifoDir)}
	if o.TTY {
		opts = append(opts, cio.WithTerminal)
	}
	defer func() {
		if retErr != nil && p.stdin != nil {
			p.stdin.release()
		}
	}()
	s.swap.RLock()
	defer s.swap.RUnlock()
	proc, err := s.curTask().Exec(cctx, id, spec, cio.NewCreator(opts...))
	if err != nil {
		return nil, newError("exec in", s.id, nil, err)
	}
	p.proc = proc
	defer func() {
		if retErr != nil {
			_, _ = proc.Delete(context.WithoutCancel(cctx), client.WithProcessKill)
		}
	}()
	if p.exit, err = proc.Wait(context.WithoutCancel(cctx)); err != nil {
		return nil, newError("exec in", s.id, nil, err)
	}
	p.started = time.Now()
	if err := proc.Start(cctx); err != nil {
		kind := error(nil)
		if strings.Contains(err.Error(), "no such file or directory") || strings.Contains(err.Error(), "executable file not found") {
			kind = ErrNotFound
			err = fmt.Errorf("%s: %w (is it in the image, on its PATH?)", cmd[0], err)
		}
		return nil, newError("exec in", s.id, kind, err)
	}
	go p.run(cctx)
	return p, nil
}

// execSpec is the process spec of cmd: the init's with o's changes.
func (s *Sandbox) execSpec(ctx context.Context, cmd []string, o ExecOptions) (*specs.Process, error) {
	p := *s.process
	p.Args = slices.Clone(cmd)
	p.Env = slices.Clone(p.Env)
	p.Terminal = o.TTY
	p.ConsoleSize = nil
	if o.TTY && o.Cols > 0 && o.Rows > 0 {
		p.ConsoleSize = &specs.Box{Width: uint(o.Cols), Height: uint(o.Rows)}
	}
	for _, kv := range o.Env {
		p.Env = replaceEnv(p.Env, kv)
	}
	if o.Dir != "" {
		p.Cwd = o.Dir
	}
	if o.User != "" {
		u, err := s.user(ctx, o.User)
		if err != nil {
			return nil, err
		}
		p.User = u
	}
	return &p, nil
}

// user resolves a user of the image (cached per sandbox).
func (s *Sandbox) user(ctx context.Context, name string) (specs.User, error) {
	if u, ok := s.users.Load(name); ok {
		return u.(specs.User), nil
	}
	spec := &oci.Spec{Process: &specs.Process{}, Root: &specs.Root{Path: "rootfs"}, Linux: &specs.Linux{}}
	// The image's files are read from the snapshot of the container that
	// backs the sandbox now: a rollback replaces the container, and the
	// one the sandbox was created with, whose snapshot goes with it.
	s.bmu.Lock()
	ctr := s.container
	s.bmu.Unlock()
	info, err := ctr.Info(ctx)
	if err != nil {
		return specs.User{}, newError("exec in", s.id, nil, err)
	}
	for _, opt := range []oci.SpecOpts{oci.WithUser(name), oci.WithAdditionalGIDs(name)} {
		if err := opt(ctx, s.c.ctrd, &info, spec); err != nil {
			return specs.User{}, errorf("exec in", s.id, ErrInvalid, "user %q: %w", name, err)
		}
	}
	s.users.Store(name, spec.Process.User)
	return spec.Process.User, nil
}

// run waits for the process to exit, killing it when its context ends or
// its timeout passes, and records its result.
func (p *Process) run(ctx context.Context) {
	defer close(p.done)
	var timeout <-chan time.Time
	if p.timeout > 0 {
		t := time.NewTimer(p.timeout)
		defer t.Stop()
		timeout = t.C
	}
	var st client.ExitStatus
	exited := false
	select {
	case st = <-p.exit:
		exited = true
		// A kill under way finishes first (its process's exit can arrive
		// before the kill returns: the shim kills an exec inside the
		// sandbox), so that its sweep below runs; none starts after this.
		p.kill.Do(func() {})
	case <-ctx.Done():
		p.terminate(ctx.Err())
	case <-timeout:
		p.terminate(errorf("exec in", p.s.id, ErrTimeout, "%s: killed after its %s timeout", p.id, p.timeout))
	case <-p.killed:
	}
	if !exited {
		select {
		case st = <-p.exit:
		case <-time.After(30 * time.Second):
			log.G(ctx).Warnf("gvx: %s: exec %s did not exit 30 s after SIGKILL", p.s.id, p.id)
		}
	}
	select {
	case <-p.killed:
		// A sandbox whose init has exited (closed, killed, expired) has
		// no process left to sweep.
		if err := p.s.killMarked(p.id); err != nil && !p.s.hasExited() {
			log.G(ctx).WithError(err).Warnf("gvx: %s: processes exec %s started may still run", p.s.id, p.id)
		}
	default:
	}
	dctx := context.WithoutCancel(ctx)
	if p.stdin != nil {
		p.stdin.release()
	}
	p.drain()
	if _, err := p.proc.Delete(dctx); err != nil && !errdefs.IsNotFound(err) {
		log.G(ctx).WithError(err).Debugf("gvx: %s: delete exec %s", p.s.id, p.id)
	}
	p.result = Result{ExitCode: int(st.ExitCode()), Duration: st.ExitTime().Sub(p.started)}
	if p.stdout != nil {
		p.result.Stdout = p.stdout.Bytes()
	}
	if p.stderr != nil {
		p.result.Stderr = p.stderr.Bytes()
	}
	if p.result.Duration < 0 || st.ExitTime().IsZero() {
		p.result.Duration = time.Since(p.started)
	}
	switch {
	case p.why != nil:
		p.err = p.why
		if kindOf(p.why) == nil {
			p.err = newError("exec in", p.s.id, nil, p.why)
		}
	case st.Error() != nil:
		p.err = newError("exec in", p.s.id, nil, st.Error())
	case st.ExitCode() > 128 && p.s.diedOOM(dctx): // killed: an OOM kill's 137, or the shim's 255
		p.err = errorf("exec in", p.s.id, ErrOOM, "%s: the sandbox was killed: out of memory (it reached its memory limit)", p.id)
	}
}

// drain waits for the output to be written: up to a second after the
// exit, so that a process the command left running with its stdout does
// not hold the result back.
func (p *Process) drain() {
	pio := p.proc.IO()
	done := make(chan struct{})
	go func() { pio.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		pio.Cancel()
		<-done
	}
	_ = pio.Close()
}

// terminate kills the process (once) for why.
func (p *Process) terminate(why error) {
	p.kill.Do(func() {
		p.why = why
		ctx, cancel := context.WithTimeout(p.s.c.Context(context.Background()), 30*time.Second)
		defer cancel()
		if err := p.proc.Kill(ctx, syscall.SIGKILL); err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).WithError(err).Debugf("gvx: %s: kill exec %s", p.s.id, p.id)
		}
		close(p.killed)
	})
}

// ID is the process's exec id in containerd.
func (p *Process) ID() string { return p.id }

// Wait waits for the process to end and its output to be written. A
// non-zero exit is not an error; a kill by timeout is ErrTimeout, the
// sandbox's death at its memory limit ErrOOM (both with 137). If ctx
// ends first, Wait returns its error and the process runs on.
func (p *Process) Wait(ctx context.Context) (Result, error) {
	select {
	case <-p.done:
		return p.result, p.err
	case <-ctx.Done():
		return Result{ExitCode: -1}, newError("wait for", p.s.id, nil, ctx.Err())
	}
}

// Done is closed when the process has ended and Wait returns at once.
func (p *Process) Done() <-chan struct{} { return p.done }

// Kill kills the process and every process it started (those that kept
// its environment's GVX_EXEC mark), and waits until they are gone.
func (p *Process) Kill(ctx context.Context) error {
	p.terminate(errorf("exec in", p.s.id, ErrNotRunning, "%s was killed", p.id))
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return newError("kill", p.s.id, nil, ctx.Err())
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	if err := p.proc.Kill(p.s.c.Context(ctx), sig); err != nil {
		return newError("signal", p.s.id, nil, err)
	}
	return nil
}

// Resize sets the size of the process's terminal.
func (p *Process) Resize(ctx context.Context, cols, rows uint32) error {
	if err := p.proc.Resize(p.s.c.Context(ctx), cols, rows); err != nil {
		return newError("resize", p.s.id, nil, err)
	}
	return nil
}

// CloseStdin closes the process's standard input.
// It ends the copy from ExecOptions.Stdin even while that reader is
// still open: the process reads EOF.
func (p *Process) CloseStdin(ctx context.Context) error {
	if p.stdin != nil {
		if err := p.stdin.Close(); err != nil {
			return newError("close stdin", p.s.id, nil, err)
		}
		return nil
	}
	if err := p.proc.CloseIO(p.s.c.Context(ctx), client.WithStdinCloser); err != nil {
		return newError("close stdin", p.s.id, nil, err)
	}
	return nil
}
