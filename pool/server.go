package pool

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/internal/flock"
	"github.com/gvxrun/gvx/janitor"
	"github.com/gvxrun/gvx/metrics"
	"github.com/gvxrun/gvx/pool/bootspec"
	"github.com/gvxrun/gvx/sandbox"
)

// Server keeps Size sandboxes booted and hands them out.
type Server struct {
	cfg    config.Config
	sentry string
	hook   string // createRuntime hook bringing loopback up ("" if none)
	pause  string // gvx-pause binary on the host
	class  string
	flags  string
	image  Image // the image sandboxes boot on (nil: gvx-pause alone)
	// OpenImage opens the image of an image pool ([pool] image); the
	// caller sets it (poolimage.Opener).
	OpenImage ImageOpener
	// Metrics are the server's (exported at the config's metrics.listen).
	Metrics *metrics.Set

	mu      sync.Mutex
	ready   []*sandbox.Sandbox
	wake    chan struct{}
	booted  int // sandboxes booted so far, for progress logs
	claimed int // sandboxes handed out so far
	reset   int // sandboxes taken back after a reset so far
	// stopping: drain took the ready sandboxes; none is taken back now.
	stopping bool
	// resetting counts the sandboxes taken back and being verified
	// (verifies waits for them).
	resetting int
	verifies  sync.WaitGroup
	// booting counts the boots under way (boots waits for them);
	// bootTime is a moving average of a boot's time.
	booting  int
	boots    sync.WaitGroup
	bootTime time.Duration
	// retryAt: no boot before, after a failed one; backoff is the next wait.
	retryAt time.Time
	backoff time.Duration
	// claims are the times of the claims in the demand window.
	claims []time.Time
	// leases are the connections of the leases out (pool.lease), which
	// leasing counts until each has taken its sandbox back.
	leases  map[net.Conn]struct{}
	leasing sync.WaitGroup
	// agents are the reset agents of a lease pool's sandboxes, by id.
	agents map[string]*agent
	// readied is closed (and replaced) when a sandbox joins the ready
	// list: leases waiting for one try again.
	readied chan struct{}
}

// NewServer checks the configuration and the binaries a pool needs.
func NewServer(cfg config.Config, sentry string) (*Server, error) {
	if cfg.Pool.Size <= 0 {
		return nil, fmt.Errorf("pool.size is %d: set [pool] size = N (N ≥ 1) in the gvx config, or pass --size", cfg.Pool.Size)
	}
	if cfg.Pool.MaxSize == 0 {
		cfg.Pool.MaxSize = min(4*cfg.Pool.Size, 1024)
	}
	if cfg.Pool.BootConcurrency == 0 {
		cfg.Pool.BootConcurrency = runtime.NumCPU()
	}
	s := &Server{cfg: cfg, sentry: sentry, class: bootspec.Class(cfg, sentry), flags: strings.Join(bootspec.Flags(cfg), " "), wake: make(chan struct{}, 1),
		leases: map[net.Conn]struct{}{}, agents: map[string]*agent{}, readied: make(chan struct{}), backoff: time.Second, Metrics: metrics.New("pool")}
	s.Metrics.Pool(cfg.PoolSocket(), func() float64 { return float64(s.status().Ready) }, func() float64 { return float64(s.target()) })
	// The NAT sandboxes of this state directory (tasks of any runtime
	// handler sharing it, and the pool's own with network = "nat").
	s.Metrics.NAT(cfg.Layout())
	if cfg.Network == "sandbox" {
		hook, err := config.HookPath(sentry)
		if err != nil {
			return nil, err
		}
		s.hook = hook
	}
	s.pause = bootspec.PausePath(sentry)
	if st, err := os.Stat(s.pause); err != nil || st.IsDir() {
		return nil, fmt.Errorf("%s not found: install it next to %s with `make install`", s.pause, sentry)
	}
	return s, nil
}

// Class is the class of the sandboxes this server boots.
func (s *Server) Class() string { return s.class }

// Serve boots sandboxes and answers claims on the pool socket until ctx is
// done; then it destroys the sandboxes still ready (claimed ones belong to
// their tasks) and removes the socket.
func (s *Server) Serve(ctx context.Context) error {
	dir := s.cfg.PoolDir()
	unlock, err := lockPoolDir(ctx, dir)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.MkdirAll(string(dir), 0o711); err != nil {
		return fmt.Errorf("create pool dir: %w", err)
	}
	if err := os.Chmod(string(dir), 0o711); err != nil {
		return err
	}
	s.removeStale(ctx)
	if err := s.installRootfs(); err != nil {
		return err
	}
	if s.cfg.Pool.Image != "" {
		if s.OpenImage == nil {
			return fmt.Errorf("pool.image %q: this pool server cannot open images (no image opener)", s.cfg.Pool.Image)
		}
		// The copy of gvx-pause installRootfs made, on the same file
		// system as the image's upper directory.
		im, err := s.OpenImage(ctx, dir.Image(), s.pauseCopy())
		if err != nil {
			return err
		}
		s.image = im
	}
	sock := s.cfg.PoolSocket()
	if err := os.MkdirAll(filepath.Dir(sock), 0o711); err != nil {
		return fmt.Errorf("create socket dir: %w", err)
	}
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
		s.closeImage(ctx)
		return fmt.Errorf("pool socket %s: another `gvx pool serve` is listening there", sock)
	}
	_ = os.Remove(sock)
	old := unix.Umask(0o077)
	ln, err := net.Listen("unix", sock)
	unix.Umask(old)
	if err != nil {
		s.closeImage(ctx)
		return fmt.Errorf("listen on %s: %w", sock, err)
	}
	if m := s.cfg.Metrics; m.Listen != "" {
		if err := metrics.Endpoint(ctx, m.Listen, m.AllowRemote, s.Metrics); err != nil {
			ln.Close()
			s.closeImage(ctx)
			return err
		}
	}
	log.G(ctx).Infof("gvx pool: class %s, keeping %d sandboxes ready, claims on %s", s.class, s.cfg.Pool.Size, sock)
	go janitor.Every(ctx, s.cfg.Janitor.Interval, janitor.FromConfig(s.cfg, s.sentry), s.swept)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.fill(ctx) }()
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serveConn(ctx, conn)
		}
	}()
	<-ctx.Done()
	ln.Close()
	wg.Wait()
	_ = os.Remove(sock)
	return s.drain(context.WithoutCancel(ctx))
}

// drain destroys every ready sandbox, and the pool's rootfs when no
// claimed sandbox uses it any more.
func (s *Server) drain(ctx context.Context) error {
	s.mu.Lock()
	ready := s.ready
	s.ready, s.stopping = nil, true
	s.mu.Unlock()
	var errs []error
	for _, sb := range ready {
		t0 := time.Now()
		s.dropAgent(sb.ID)
		err := sb.Destroy(ctx, s.sentry)
		s.Metrics.Observe(metrics.OpDestroy, t0, err)
		if err != nil {
			errs = append(errs, err)
		}
	}
	// Leases end (their sandboxes destroyed); sandboxes being reset see
	// stopping and destroy themselves.
	s.endLeases()
	s.verifies.Wait()
	log.G(ctx).Infof("gvx pool: stopped, destroyed %d ready sandboxes", len(ready))
	s.closeImage(ctx)
	// Sandboxes handed out keep the rootfs; the last one's destroy
	// removes it (Sandbox.Destroy).
	sandbox.RemovePoolDirLocked(s.cfg.PoolDir())
	return errors.Join(errs...)
}

// closeImage unmounts the pool's image; its lease goes too unless claimed
// sandboxes still run on its layers (the next server's start deletes it).
func (s *Server) closeImage(ctx context.Context) {
	if s.image == nil {
		return
	}
	running := claimedRunning(s.cfg.PoolDir())
	if running > 0 {
		log.G(ctx).Infof("gvx pool: %d claimed sandboxes still run on %s: keeping its lease (the next `gvx pool serve` deletes it)", running, s.image.Ref())
	}
	s.image.Close(ctx, running > 0)
	s.image = nil
}

// claimedRunning counts the claimed sandboxes in dir whose process runs.
func claimedRunning(dir api.PoolDir) int {
	n := 0
	for _, d := range dir.Sandboxes() {
		if _, err := os.Stat(d.Claimed()); err != nil {
			continue
		}
		if sb, err := sandbox.Load(d.Record()); err == nil && sb.Alive() {
			n++
		}
	}
	return n
}

// lockPoolDir takes the pool directory's lock (api.PoolDir.Lock, flock'd
// until unlock), waiting for a previous server that is still shutting
// down — destroying its ready sandboxes, removing the directory — to
// finish, so that two servers never work on one directory. The lock file
// goes with the directory (sandbox.RemovePoolDirLocked).
func lockPoolDir(ctx context.Context, dir api.PoolDir) (unlock func(), err error) {
	deadline := time.Now().Add(2 * time.Minute)
	for waited := false; ; waited = true {
		if err := os.MkdirAll(string(dir), 0o711); err != nil {
			return nil, fmt.Errorf("create pool dir: %w", err)
		}
		f, err := os.OpenFile(dir.Lock(), os.O_CREATE|os.O_RDWR, 0o600)
		if errors.Is(err, fs.ErrNotExist) {
			// The directory went meanwhile (sandbox.RemovePoolDir): make
			// it again.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("pool lock: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			if _, err := os.Stat(dir.Lock()); err == nil {
				return func() { _ = flock.Close(f) }, nil
			}
			// Removed with its directory by the server it waited for.
		}
		f.Close()
		if !waited {
			log.G(ctx).Infof("gvx pool: waiting for the previous server of %s to finish", dir)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pool dir %s: another `gvx pool serve` still holds %s after 2 minutes", dir, dir.Lock())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// removeStale destroys sandboxes a previous server left ready (it was
// killed); claimed ones belong to tasks and are left alone.
func (s *Server) removeStale(ctx context.Context) {
	deadline := time.Now().Add(bootWait) // for all of them together
	for _, d := range s.cfg.PoolDir().Sandboxes() {
		if _, err := os.Stat(d.Claimed()); err == nil {
			continue
		}
		sb, err := sandbox.Load(d.Record())
		if err != nil {
			// Died while booting: its gvx-sentry create or start,
			// which a server's death does not stop (sandbox.Run),
			// may still be making the sandbox — its cgroup, its
			// processes — and would leave what it makes after this
			// destroy unowned. Wait for it first.
			sb = s.newSandbox(filepath.Base(string(d)))
			waitBooters(ctx, sb.Root, time.Until(deadline))
		}
		if err := sb.Destroy(ctx, s.sentry); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx pool: remove stale sandbox %s", sb.ID)
		} else {
			log.G(ctx).Infof("gvx pool: removed stale sandbox %s", sb.ID)
		}
	}
}

// swept counts what a periodic janitor sweep reclaimed.
func (s *Server) swept(r *janitor.Report) {
	s.Metrics.Swept(r.Reclaimed(), r.Failed())
}

// newSandbox describes pool sandbox id as this server boots it.
func (s *Server) newSandbox(id string) *sandbox.Sandbox {
	d := s.cfg.PoolDir().Sandbox(id)
	return &sandbox.Sandbox{
		ID: id, Dir: string(d), Root: d.Root(), PidFile: d.PidFile(), Cgroup: "/" + api.PoolCgroupParent + "/" + id, Flags: s.flags,
		Pool: &sandbox.Pool{Class: s.class, Dir: s.cfg.PoolDir(), Socket: s.cfg.PoolSocket(), Pause: bootspec.PauseInGuest},
	}
}
