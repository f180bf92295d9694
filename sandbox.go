package gvx

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/dockerapi"
	"github.com/gvxrun/gvx/internal/randid"
	"github.com/gvxrun/gvx/rollout"
)

// Labels gvx keeps on a sandbox's container.
const (
	// LabelSandbox marks a container as a gvx SDK sandbox.
	LabelSandbox = "dev.gvx.sdk"
	// LabelImage is the Config.Image the sandbox was made from.
	LabelImage = "dev.gvx.sdk.image"
	// LabelDocker is "true" for a docker-mode sandbox.
	LabelDocker = "dev.gvx.sdk.docker"
	// LabelOwned lists (JSON) the host files the sandbox owns: volume
	// clones, published sockets; Close removes them.
	LabelOwned = "dev.gvx.sdk.owned"
	// LabelPool names the pool the sandbox was acquired from.
	LabelPool = "dev.gvx.sdk.pool"
)

// Timings says how long the phases of New took.
type Timings struct {
	Image   time.Duration // finding, importing and unpacking the image
	Volumes time.Duration // cloning volumes
	Create  time.Duration // creating the container and its task (the sandbox boots)
	Start   time.Duration // starting the init
	Docker  time.Duration // until the inner dockerd answered (docker mode)
	Total   time.Duration
}

// Sandbox is one gVisor sandbox: a containerd container and its task.
type Sandbox struct {
	c   *Client
	id  string
	cfg Config
	bmu sync.Mutex // guards container, task, exited and rs (a rollback replaces them)
	// swap is held by a rollback while it replaces the backing, and
	// read-held by an exec from its choice of backing to its start: an
	// exec starts in the backing before the rollback (which kills it) or
	// in the one after, never in one being replaced.
	swap      sync.RWMutex
	container client.Container // the current backing (a rollback's restore is a new one)
	task      client.Task
	// newIO is the stdio this process holds of the task New created,
	// until the rollout engine takes that task over (closeNewIO).
	newIO cio.IO
	rs    *rollout.Sandbox // the rollout engine's, once checkpointed
	// restored says the backing is a container the rollout engine
	// restored (a rollback's or fork's, attached by a later process).
	restored  bool
	process   *specs.Process // the init's, the base of every Exec
	info      containers.Container
	owned     owned
	timings   Timings
	exited    chan struct{} // closed when the init has exited
	watched   bool          // a goroutine closes exited
	status    client.ExitStatus
	timer     *time.Timer
	timedOut  atomic.Bool
	initStdin *stdinStream // nil without Config.Stdin
	oomKilled atomic.Bool  // a TaskOOM event came for the init's sandbox
	execs     atomic.Uint64
	users     sync.Map // user string → specs.User
	onClose   func(context.Context) error
	closeOnce sync.Once
	closeErr  error
}

// owned is what the sandbox has on the host besides containerd's.
type owned struct {
	Volumes []string `json:"volumes,omitempty"` // clones to remove once detached
	Files   []string `json:"files,omitempty"`   // symlinks and directories to remove
}

// New makes and starts a sandbox: its image is found (an archive is
// imported once), volumes to clone are cloned, the container and its
// task are created and the init started; in docker mode New returns once
// the inner dockerd answers. If anything fails, everything made so far is
// removed.
func (c *Client) New(ctx context.Context, cfg Config) (*Sandbox, error) {
	return c.newSandbox(ctx, cfg, nil, "")
}

// newSandbox is New with the runtime options (a pool's config; nil: the
// client's) and the pool's name.
func (c *Client) newSandbox(ctx context.Context, cfg Config, ropts any, pool string) (_ *Sandbox, retErr error) {
	t0 := time.Now()
	if c.isClosed() {
		return nil, newError("new", cfg.ID, ErrClosed, nil)
	}
	if cfg.ID == "" {
		cfg.ID = randomID()
	}
	id := cfg.ID
	if err := validate(cfg); err != nil {
		return nil, newError("new", id, ErrInvalid, err)
	}
	ctx = c.Context(ctx)
	s := &Sandbox{c: c, id: id, cfg: cfg, exited: make(chan struct{})}
	defer func() {
		if retErr != nil {
			s.cleanup(context.WithoutCancel(ctx))
		}
	}()
	img, err := c.resolver().Resolve(ctx, cfg.Image)
	if err != nil {
		return nil, newError("new", id, nil, err)
	}
	s.timings.Image = time.Since(t0)
	t1 := time.Now()
	mounts, err := s.prepareMounts(ctx)
	if err != nil {
		return nil, err
	}
	s.timings.Volumes = time.Since(t1)
	t1 = time.Now()
	if ropts == nil {
		if ropts, err = c.runtimeOptions(cfg); err != nil {
			return nil, newError("new", id, ErrInvalid, err)
		}
	}
	labels, err := s.labels(pool)
	if err != nil {
		return nil, newError("new", id, ErrInvalid, err)
	}
	cont, err := c.ctrd.NewContainer(ctx, id,
		client.WithSnapshotter(c.opts.Snapshotter),
		client.WithNewSnapshot(id, img),
		client.WithImageName(img.Name()),
		client.WithNewSpec(specOpts(cfg, img, mounts)...),
		client.WithRuntime(api.RuntimeType, ropts),
		client.WithContainerLabels(labels))
	if err != nil {
		kind := kindOf(err)
		if errdefs.IsAlreadyExists(err) {
			err = fmt.Errorf("a sandbox (or container) with this id exists in namespace %s: %w; Close it or choose another id", c.opts.Namespace, err)
		}
		return nil, newError("new", id, kind, err)
	}
	s.container = cont
	if err := s.load(ctx); err != nil {
		return nil, err
	}
	stdin, ready := s.stdin(ctx)
	defer close(ready) // the stdin's EOF closes it once the init has started
	// containerd's runc shim code takes all streams or none.
	stdout, stderr := cfg.Stdout, cfg.Stderr
	if stdin != nil || stdout != nil || stderr != nil {
		if stdout == nil {
			stdout = io.Discard
		}
		if stderr == nil && !cfg.TTY {
			stderr = io.Discard
		}
	}
	opts := []cio.Opt{cio.WithStreams(stdin, stdout, stderr), cio.WithFIFODir(c.fifoDir)}
	if cfg.TTY {
		opts = append(opts, cio.WithTerminal)
	}
	task, err := cont.NewTask(ctx, cio.NewCreator(opts...))
	if err != nil {
		return nil, newError("new", id, nil, fmt.Errorf("create the sandbox: %w", err))
	}
	s.task, s.newIO = task, task.IO()
	if err := s.watch(ctx); err != nil {
		return nil, err
	}
	if cfg.TTY && cfg.Cols > 0 && cfg.Rows > 0 {
		// Sized before the init runs: a resize after Start races its
		// first command (stty size printed the default size).
		if err := task.Resize(ctx, cfg.Cols, cfg.Rows); err != nil {
			return nil, newError("new", id, nil, fmt.Errorf("size the terminal: %w", err))
		}
	}
	s.timings.Create = time.Since(t1)
	t1 = time.Now()
	if err := task.Start(ctx); err != nil {
		return nil, newError("new", id, nil, fmt.Errorf("start the init: %w", err))
	}
	s.timings.Start = time.Since(t1)
	if cfg.Docker {
		t1 = time.Now()
		if err := s.waitDocker(ctx); err != nil {
			return nil, err
		}
		s.timings.Docker = time.Since(t1)
	}
	if cfg.Timeout > 0 {
		s.timer = time.AfterFunc(cfg.Timeout, s.expire)
	}
	s.timings.Total = time.Since(t0)
	return s, nil
}

// load reads what Exec needs from the container.
func (s *Sandbox) load(ctx context.Context) error {
	info, err := s.container.Info(ctx)
	if err != nil {
		return newError("load", s.id, nil, err)
	}
	spec, err := s.container.Spec(ctx)
	if err != nil {
		return newError("load", s.id, nil, err)
	}
	if spec.Process == nil {
		return errorf("load", s.id, ErrInvalid, "the container's spec has no process")
	}
	s.info, s.process = info, spec.Process
	if raw := info.Labels[LabelOwned]; raw != "" {
		_ = json.Unmarshal([]byte(raw), &s.owned)
	}
	return nil
}

// stdin is the init's stdin: Config.Stdin, whose end (its EOF, or
// CloseStdin) closes the task's stdin once the init has started (ready is
// closed then).
func (s *Sandbox) stdin(ctx context.Context) (io.Reader, chan struct{}) {
	ready := make(chan struct{})
	if s.cfg.Stdin == nil {
		return nil, ready
	}
	s.initStdin = newStdinStream(s.cfg.Stdin, func() error {
		<-ready
		if t := s.curTask(); t != nil {
			return t.CloseIO(context.WithoutCancel(ctx), client.WithStdinCloser)
		}
		return nil
	})
	return s.initStdin, ready
}

// watch records the init's exit: of the current task, unless a rollback
// replaced it meanwhile (then the new one's watch does).
func (s *Sandbox) watch(ctx context.Context) error {
	t := s.curTask()
	ch, err := t.Wait(s.c.Context(context.WithoutCancel(ctx)))
	if err != nil {
		return newError("wait", s.id, nil, err)
	}
	s.watched = true
	oom := s.watchOOM(ctx)
	go func() {
		st := <-ch
		oom(st.ExitCode())
		s.bmu.Lock()
		if s.task != t {
			s.bmu.Unlock()
			return
		}
		s.status = st
		close(s.exited)
		s.bmu.Unlock()
		if s.initStdin != nil {
			s.initStdin.release()
		}
	}()
	return nil
}

// curTask is the task of the sandbox's current backing.
func (s *Sandbox) curTask() client.Task {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	return s.task
}

// expire is Config.Timeout's end: the sandbox is killed, after SIGTERM
// and Config.StopGrace if that is set.
func (s *Sandbox) expire() {
	s.timedOut.Store(true)
	ctx, cancel := context.WithTimeout(s.c.Context(context.Background()), 30*time.Second+s.cfg.StopGrace)
	defer cancel()
	if g := s.cfg.StopGrace; g > 0 {
		_ = s.curTask().Kill(ctx, syscall.SIGTERM, client.WithKillAll)
		select {
		case <-s.Exited():
			return
		case <-time.After(g):
		}
	}
	_ = s.curTask().Kill(ctx, syscall.SIGKILL, client.WithKillAll)
}

// waitDocker waits until the inner dockerd answers on its host socket.
func (s *Sandbox) waitDocker(ctx context.Context) error {
	s.c.progressf("%s: waiting for the inner dockerd", s.id)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err := dockerapi.New(s.DockerSocket()).WaitReady(wctx, func() error {
		select {
		case <-s.exited:
			return fmt.Errorf("the sandbox exited (status %d) before its dockerd answered: its init must start dockerd (see README, Docker inside gvx); run it with Stdout/Stderr set to see why", s.status.ExitCode())
		default:
			return nil
		}
	})
	if err != nil {
		return newError("new", s.id, ErrNotRunning, err)
	}
	return nil
}

// ID is the sandbox's id.
func (s *Sandbox) ID() string { return s.id }

// Timings says how long New's phases took (zero for an attached sandbox).
func (s *Sandbox) Timings() Timings { return s.timings }

// DockerSocket is where the host reaches a docker-mode sandbox's dockerd
// (DOCKER_HOST=unix://…).
func (s *Sandbox) DockerSocket() string {
	return s.c.cfg.Layout().DockerSocket(s.c.opts.Namespace, s.id)
}

// eofReader calls eof once when r reports EOF.
func (c *Client) isClosed() bool {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	return c.closed
}

// removeAll removes paths, ignoring those already gone.
func removeAll(paths []string) error {
	var first error
	for i := len(paths) - 1; i >= 0; i-- {
		if err := os.RemoveAll(paths[i]); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// randomID is "gvx" and 12 random letters and digits.
func randomID() string { return randid.New("gvx", 12) }
