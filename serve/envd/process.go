package envd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/gvxrun/gvx/serve/backend"
	"github.com/gvxrun/gvx/serve/connect"
)

// proc is a process the sandbox's envd started. Its output goes to every
// attached stream; it keeps running when they go (as envd's processes do).
type proc struct {
	pid   uint32
	tag   *string
	cfg   *ProcessConfig
	tty   bool
	stdin *inputPipe // nil without stdin
	p     backend.Process

	mu       sync.Mutex
	subs     map[*subscriber]bool
	end      *EndEvent
	signaled syscall.Signal
	done     chan struct{}
}

// MaxQueuedOutput bounds the output one attached stream may fall behind
// by: a client that reads slower than its process writes is cut off with
// ResourceExhausted (the process goes on; Connect attaches again) instead
// of the service holding the output in memory without bound.
const MaxQueuedOutput = 32 << 20

// subscriber is one attached stream's queue of events (a slow client
// never stalls the process; it is dropped past MaxQueuedOutput).
type subscriber struct {
	mu       sync.Mutex
	queue    []*ProcessEvent
	bytes    int  // output queued
	overflow bool // the queue passed MaxQueuedOutput
	wake     chan struct{}
}

func newSubscriber() *subscriber { return &subscriber{wake: make(chan struct{}, 1)} }

func (q *subscriber) push(e *ProcessEvent) {
	n := 0
	if d := e.Data; d != nil {
		n = len(d.Stdout) + len(d.Stderr) + len(d.PTY)
	}
	q.mu.Lock()
	switch {
	case q.overflow:
	case q.bytes+n > MaxQueuedOutput:
		q.overflow, q.queue, q.bytes = true, nil, 0
	default:
		q.queue = append(q.queue, e)
		q.bytes += n
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take is the queued events, and whether the client fell too far behind.
func (q *subscriber) take() ([]*ProcessEvent, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.queue
	q.queue, q.bytes = nil, 0
	return out, q.overflow
}

func (p *proc) publish(e *ProcessEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for q := range p.subs {
		q.push(e)
	}
}

func (p *proc) subscribe() *subscriber {
	q := newSubscriber()
	p.mu.Lock()
	p.subs[q] = true
	p.mu.Unlock()
	return q
}

func (p *proc) unsubscribe(q *subscriber) {
	p.mu.Lock()
	delete(p.subs, q)
	p.mu.Unlock()
}

// output is an io.Writer publishing data events.
type output struct {
	p    *proc
	kind int // 1 stdout, 2 stderr, 3 pty
}

func (o output) Write(b []byte) (int, error) {
	d := &DataEvent{}
	c := append([]byte(nil), b...)
	switch o.kind {
	case 1:
		d.Stdout = c
	case 2:
		d.Stderr = c
	default:
		d.PTY = c
	}
	o.p.publish(&ProcessEvent{Data: d})
	return len(b), nil
}

func (s *Server) start(ctx context.Context, r *http.Request, req *StartRequest, st *connect.Stream[StreamResponse]) error {
	if req.Process == nil || req.Process.Cmd == "" {
		return connect.Errorf(connect.InvalidArgument, "StartRequest.process.cmd is empty: name the program to run")
	}
	timeout, _, err := connect.Timeout(r)
	if err != nil {
		return err
	}
	user := s.user(r)
	dir := s.workdir(user)
	if req.Process.Cwd != nil && *req.Process.Cwd != "" {
		dir = resolve(user, *req.Process.Cwd)
	}
	p := &proc{tag: req.Tag, cfg: req.Process, subs: map[*subscriber]bool{}, done: make(chan struct{})}
	c := backend.Cmd{
		Args:    append([]string{req.Process.Cmd}, req.Process.Args...),
		Env:     s.env(user, req.Process.Envs),
		Dir:     dir,
		User:    user,
		Timeout: timeout, // Connect-Timeout-Ms is the process's lifetime (0: none)
	}
	if req.PTY != nil {
		p.tty = true
		c.Tty = true
		if req.PTY.Size != nil {
			c.Cols, c.Rows = req.PTY.Size.Cols, req.PTY.Size.Rows
		}
		c.Stdout = output{p, 3}
	} else {
		c.Stdout, c.Stderr = output{p, 1}, output{p, 2}
	}
	if req.Stdin == nil || *req.Stdin || p.tty {
		p.stdin = newInputPipe()
		c.Stdin = p.stdin
	}
	q := p.subscribe()
	defer p.unsubscribe(q)

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return connect.Errorf(connect.Unavailable, "the sandbox is going away")
	}
	s.nextPID++
	p.pid = s.nextPID
	s.mu.Unlock()
	// The start event goes first: output published from now on queues
	// behind it.
	q.push(&ProcessEvent{Start: &StartEvent{PID: p.pid}})

	t0 := time.Now()
	release := func() {}
	if s.startGate != nil {
		r, err := s.startGate()
		if err != nil {
			return connect.Errorf(connect.Unavailable, "start %s: %v", req.Process.Cmd, err)
		}
		release = r
	}
	bp, err := s.sb.Exec(s.ctx, c)
	release()
	log.G(ctx).Debugf("envd: pid %d %s started in %s", p.pid, req.Process.Cmd, time.Since(t0))
	if err != nil {
		if errdefs.IsResourceExhausted(err) { // the sandbox's max_execs
			return connect.Errorf(connect.ResourceExhausted, "start %s: %v", req.Process.Cmd, err)
		}
		return connect.Errorf(connect.Internal, "start %s: %v", req.Process.Cmd, err)
	}
	p.p = bp
	s.mu.Lock()
	s.procs[p.pid] = p
	s.wg.Add(1)
	s.mu.Unlock()
	go s.reap(p)
	return relay(ctx, r, p, q, st)
}

// reap waits for p's end and publishes it.
func (s *Server) reap(p *proc) {
	defer s.wg.Done()
	t0 := time.Now()
	code, err := p.p.Wait(context.Background())
	log.L.Debugf("envd: pid %d ended %s after it started", p.pid, time.Since(t0))
	if p.stdin != nil {
		p.stdin.Close()
	}
	end := &EndEvent{Exited: true, ExitCode: int32(code), Status: "exit status " + strconv.Itoa(code)}
	p.mu.Lock()
	sig := p.signaled
	p.mu.Unlock()
	switch {
	case err != nil:
		end = &EndEvent{ExitCode: -1, Status: "error", Error: err.Error()}
	case code > 128 && (syscall.Signal(code-128) == sig || s.ctx.Err() != nil || code == 137):
		name := syscall.Signal(code - 128).String()
		end = &EndEvent{ExitCode: -1, Status: "signal: " + name, Error: "signal: " + name}
	case code != 0:
		end.Error = end.Status
	}
	// The process leaves the table before its end is sent: a client
	// that got the end and signals it again must get not_found.
	s.mu.Lock()
	delete(s.procs, p.pid)
	s.mu.Unlock()
	p.mu.Lock()
	p.end = end
	p.mu.Unlock()
	close(p.done)
	p.publish(&ProcessEvent{End: end})
}

// relay sends q's events on st until the end event or the client goes,
// with keepalives at the interval the client asked for.
func relay(ctx context.Context, r *http.Request, p *proc, q *subscriber, st *connect.Stream[StreamResponse]) error {
	every := 90 * time.Second
	if v, err := strconv.Atoi(r.Header.Get("Keepalive-Ping-Interval")); err == nil && v > 0 {
		every = time.Duration(v) * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		evs, over := q.take()
		for _, e := range evs {
			if err := st.Send(&StreamResponse{Event: e}); err != nil {
				return err
			}
			if e.End != nil {
				return nil
			}
		}
		if over {
			return connect.Errorf(connect.ResourceExhausted, "process %d: this stream fell more than %d MiB behind the process's output and was dropped; the process goes on (Connect to attach again, read faster or write less)",
				p.pid, MaxQueuedOutput>>20)
		}
		select {
		case <-q.wake:
		case <-tick.C:
			if err := st.Send(&StreamResponse{Event: &ProcessEvent{Keepalive: &struct{}{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Server) find(sel *ProcessSelector) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sel != nil && sel.PID != nil {
		if p, ok := s.procs[*sel.PID]; ok {
			return p, nil
		}
	} else if sel != nil && sel.Tag != nil {
		for _, p := range s.procs {
			if p.tag != nil && *p.tag == *sel.Tag {
				return p, nil
			}
		}
	}
	return nil, connect.Errorf(connect.NotFound, "process with %s not found", sel)
}

func (s *Server) connect(ctx context.Context, r *http.Request, req *ConnectRequest, st *connect.Stream[StreamResponse]) error {
	p, err := s.find(req.Process)
	if err != nil {
		return err
	}
	q := p.subscribe()
	defer p.unsubscribe(q)
	p.mu.Lock()
	end := p.end
	p.mu.Unlock()
	if end != nil {
		return connect.Errorf(connect.NotFound, "process with %s has ended", req.Process)
	}
	if err := st.Send(&StreamResponse{Event: &ProcessEvent{Start: &StartEvent{PID: p.pid}}}); err != nil {
		return err
	}
	return relay(ctx, r, p, q, st)
}

func (s *Server) list(context.Context, *http.Request, *Empty) (*ListResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &ListResponse{Processes: []ProcessInfo{}}
	for _, p := range s.procs {
		out.Processes = append(out.Processes, ProcessInfo{Config: p.cfg, PID: p.pid, Tag: p.tag})
	}
	return out, nil
}

func (s *Server) sendInput(_ context.Context, _ *http.Request, req *SendInputRequest) (*Empty, error) {
	p, err := s.find(req.Process)
	if err != nil {
		return nil, err
	}
	if p.stdin == nil {
		return nil, connect.Errorf(connect.FailedPrecondition, "process with %s was started without stdin (start it with stdin: true)", req.Process)
	}
	if req.Input != nil {
		b := req.Input.Stdin
		if b == nil {
			b = req.Input.PTY
		}
		if err := p.stdin.write(b); err != nil {
			return nil, connect.Errorf(connect.FailedPrecondition, "process with %s: %v", req.Process, err)
		}
	}
	return &Empty{}, nil
}

func (s *Server) closeStdin(_ context.Context, _ *http.Request, req *CloseStdinRequest) (*Empty, error) {
	p, err := s.find(req.Process)
	if err != nil {
		return nil, err
	}
	if p.stdin != nil {
		p.stdin.Close()
	}
	return &Empty{}, nil
}

func (s *Server) sendSignal(ctx context.Context, _ *http.Request, req *SendSignalRequest) (*Empty, error) {
	p, err := s.find(req.Process)
	if err != nil {
		return nil, err
	}
	select {
	case <-p.done:
		return nil, connect.Errorf(connect.NotFound, "process with %s has ended", req.Process)
	default:
	}
	sig := syscall.Signal(req.Signal)
	if sig <= 0 || sig > 64 {
		return nil, connect.Errorf(connect.InvalidArgument, "signal %d: send SIGNAL_SIGTERM or SIGNAL_SIGKILL", sig)
	}
	p.mu.Lock()
	p.signaled = sig
	p.mu.Unlock()
	if err := p.p.Signal(ctx, sig); err != nil {
		select {
		case <-p.done:
			return nil, connect.Errorf(connect.NotFound, "process with %s has ended", req.Process)
		default:
		}
		if errors.Is(err, backend.ErrEnded) {
			return nil, connect.Errorf(connect.NotFound, "process with %s has ended", req.Process)
		}
		return nil, connect.Errorf(connect.Internal, "signal process with %s: %v", req.Process, err)
	}
	if sig == syscall.SIGKILL && p.stdin != nil {
		// A killed process reads no more; an open stdin would keep its
		// output from draining (containerd's shim waits for it).
		p.stdin.Close()
	}
	return &Empty{}, nil
}

func (s *Server) update(ctx context.Context, _ *http.Request, req *UpdateRequest) (*Empty, error) {
	p, err := s.find(req.Process)
	if err != nil {
		return nil, err
	}
	if req.PTY == nil || req.PTY.Size == nil {
		return &Empty{}, nil
	}
	if !p.tty {
		return nil, connect.Errorf(connect.FailedPrecondition, "process with %s has no terminal to resize", req.Process)
	}
	if err := p.p.Resize(ctx, req.PTY.Size.Cols, req.PTY.Size.Rows); err != nil {
		return nil, connect.Errorf(connect.Internal, "resize process with %s: %v", req.Process, err)
	}
	return &Empty{}, nil
}

// inputPipe is a process's stdin: writes never block (they are queued),
// reads wait for data or the close.
type inputPipe struct {
	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	closed bool
}

func newInputPipe() *inputPipe {
	p := &inputPipe{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *inputPipe) write(b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("stdin is closed")
	}
	p.buf = append(p.buf, b...)
	p.cond.Broadcast()
	return nil
}

// Read implements io.Reader.
func (p *inputPipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.buf) == 0 && !p.closed {
		p.cond.Wait()
	}
	if len(p.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.buf)
	p.buf = p.buf[n:]
	return n, nil
}

// Close ends the input after what was written.
func (p *inputPipe) Close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
}
