package pool

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/oci"
)

// rootfsDir (under the pool directory) is the root filesystem of every pool
// sandbox's root container: gvx-pause alone.
const rootfsDir = "rootfs"

// imageDir (under the pool directory) is where an image pool mounts its
// image.
const imageDir = "image"

// idPrefix starts the id of every pool sandbox.
const idPrefix = "gvxpool-"

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

	mu      sync.Mutex
	ready   []*Sandbox
	wake    chan struct{}
	booted  int // sandboxes booted so far, for progress logs
	claimed int // sandboxes handed out so far
	// lastClaim is when the last sandbox was handed out.
	lastClaim time.Time
}

// NewServer checks the configuration and the binaries a pool needs.
func NewServer(cfg config.Config, sentry string) (*Server, error) {
	if cfg.Pool.Size <= 0 {
		return nil, fmt.Errorf("pool.size is %d: set [pool] size = N (N ≥ 1) in the gvx config, or pass --size", cfg.Pool.Size)
	}
	s := &Server{cfg: cfg, sentry: sentry, class: Class(cfg, sentry), flags: strings.Join(BootFlags(cfg), " "), wake: make(chan struct{}, 1)}
	if cfg.Network == "sandbox" {
		hook, err := config.HookPath(sentry)
		if err != nil {
			return nil, err
		}
		s.hook = hook
	}
	s.pause = filepath.Join(filepath.Dir(sentry), config.PauseName)
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
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("create pool dir: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
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
		im, err := s.OpenImage(ctx, filepath.Join(dir, imageDir), filepath.Join(dir, rootfsDir, strings.TrimPrefix(pauseInGuest, "/")))
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
	log.G(ctx).Infof("gvx pool: class %s, keeping %d sandboxes ready, claims on %s", s.class, s.cfg.Pool.Size, sock)

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
	s.ready = nil
	s.mu.Unlock()
	var errs []error
	for _, sb := range ready {
		if err := sb.Destroy(ctx, s.sentry); err != nil {
			errs = append(errs, err)
		}
	}
	log.G(ctx).Infof("gvx pool: stopped, destroyed %d ready sandboxes", len(ready))
	s.closeImage(ctx)
	// Sandboxes handed out keep the rootfs; the last one's destroy
	// removes it (Sandbox.Destroy).
	removePoolDir(s.cfg.PoolDir())
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
func claimedRunning(dir string) int {
	entries, _ := os.ReadDir(dir)
	n := 0
	for _, e := range entries {
		d := filepath.Join(dir, e.Name())
		if !strings.HasPrefix(e.Name(), idPrefix) {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, claimedFile)); err != nil {
			continue
		}
		if sb, err := LoadSandbox(filepath.Join(d, stateFile)); err == nil && sb.Alive() {
			n++
		}
	}
	return n
}

// removeStale destroys sandboxes a previous server left ready (it was
// killed); claimed ones belong to tasks and are left alone.
func (s *Server) removeStale(ctx context.Context) {
	entries, err := os.ReadDir(s.cfg.PoolDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), idPrefix) {
			continue
		}
		d := filepath.Join(s.cfg.PoolDir(), e.Name())
		if _, err := os.Stat(filepath.Join(d, claimedFile)); err == nil {
			continue
		}
		sb, err := LoadSandbox(filepath.Join(d, stateFile))
		if err != nil {
			// Died while booting: what is there has no process yet
			// that a forced delete would not find.
			sb = &Sandbox{ID: e.Name(), Dir: d, Flags: s.flags}
		}
		if err := sb.Destroy(ctx, s.sentry); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx pool: remove stale sandbox %s", e.Name())
		} else {
			log.G(ctx).Infof("gvx pool: removed stale sandbox %s", e.Name())
		}
	}
}

// installRootfs writes the root containers' root filesystem: a directory
// with gvx-pause, readable by the sandboxes' unprivileged uid.
func (s *Server) installRootfs() error {
	dir := filepath.Join(s.cfg.PoolDir(), rootfsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create pool rootfs: %w", err)
	}
	src, err := os.Open(s.pause)
	if err != nil {
		return err
	}
	defer src.Close()
	dst := filepath.Join(dir, strings.TrimPrefix(pauseInGuest, "/"))
	tmp, err := os.OpenFile(dst+".tmp", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return fmt.Errorf("install %s in pool rootfs: %w", config.PauseName, err)
	}
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("install %s in pool rootfs: %w", config.PauseName, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(dst+".tmp", dst)
}

// fill keeps Size sandboxes ready, booting one at a time.
func (s *Server) fill(ctx context.Context) {
	backoff := time.Second
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		s.pruneDead(ctx)
		s.mu.Lock()
		need := len(s.ready) < s.cfg.Pool.Size
		s.mu.Unlock()
		if need {
			s.settle(ctx)
			if ctx.Err() != nil {
				return
			}
			t0 := time.Now()
			sb, err := s.boot(ctx)
			s.mu.Lock()
			if err == nil {
				s.ready = append(s.ready, sb)
				s.booted++
			}
			n, booted := len(s.ready), s.booted
			s.mu.Unlock()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				log.G(ctx).WithError(err).Errorf("gvx pool: boot failed; retrying in %s", backoff)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 30*time.Second)
				continue
			}
			backoff = time.Second
			log.G(ctx).Infof("gvx pool: booted %s in %s (%d/%d ready, %d booted)", sb.ID, time.Since(t0).Round(time.Millisecond), n, s.cfg.Pool.Size, booted)
			if ctx.Err() != nil {
				return
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-tick.C:
		}
	}
}

// settle defers a refill until claims pause for refillDelay (or the pool
// runs dry): booting a sandbox takes a CPU for ~100 ms and, on cgroup v1,
// the kernel's cgroup locks, which would slow the tasks being adopted at
// that moment.
func (s *Server) settle(ctx context.Context) {
	for {
		s.mu.Lock()
		empty, quiet := len(s.ready) == 0, time.Since(s.lastClaim)
		s.mu.Unlock()
		if empty || quiet >= refillDelay {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(refillDelay - quiet):
		}
	}
}

// refillDelay is how long claims must pause before the pool refills.
const refillDelay = 250 * time.Millisecond

// pruneDead destroys ready sandboxes whose process is gone.
func (s *Server) pruneDead(ctx context.Context) {
	s.mu.Lock()
	var dead []*Sandbox
	live := s.ready[:0]
	for _, sb := range s.ready {
		if sb.Alive() {
			live = append(live, sb)
		} else {
			dead = append(dead, sb)
		}
	}
	s.ready = live
	s.mu.Unlock()
	for _, sb := range dead {
		log.G(ctx).Warnf("gvx pool: ready sandbox %s died; replacing it", sb.ID)
		_ = sb.Destroy(ctx, s.sentry)
	}
}

// boot creates and starts one sandbox.
func (s *Server) boot(ctx context.Context) (_ *Sandbox, retErr error) {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	id := idPrefix + hex.EncodeToString(rnd[:])
	sb := &Sandbox{ID: id, Dir: filepath.Join(s.cfg.PoolDir(), id), Cgroup: "/gvx-pool/" + id, Class: s.class, Flags: s.flags,
		Pool: s.cfg.PoolDir(), Socket: s.cfg.PoolSocket()}
	// A task's destroy removes the pool directory when it was the last
	// sandbox and no server was listening (this one, starting up).
	if _, err := os.Stat(filepath.Join(s.cfg.PoolDir(), rootfsDir, strings.TrimPrefix(pauseInGuest, "/"))); err != nil {
		if err := os.MkdirAll(s.cfg.PoolDir(), 0o711); err != nil {
			return nil, fmt.Errorf("create pool dir: %w", err)
		}
		if err := s.installRootfs(); err != nil {
			return nil, err
		}
	}
	defer func() {
		if retErr != nil {
			_ = sb.Destroy(context.WithoutCancel(ctx), s.sentry)
		}
	}()
	for _, d := range []string{sb.Dir, sb.Bundle()} {
		if err := os.Mkdir(d, 0o711); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	spec := rootSpec(s.cfg, filepath.Join(s.cfg.PoolDir(), rootfsDir), sb.Cgroup)
	if s.image != nil {
		spec = imageRootSpec(s.cfg, s.image.Dir(), sb.Cgroup)
		sb.Image, sb.Layers = s.image.Ref(), s.image.Layers()
	}
	if _, err := oci.Prepare(spec, s.cfg); err != nil {
		return nil, err
	}
	if s.hook != "" {
		oci.AddCreateRuntimeHook(spec, s.hook, "--loopback")
	}
	if err := oci.WriteSpec(sb.Bundle(), spec); err != nil {
		return nil, err
	}
	pidFile := filepath.Join(sb.Dir, "pid")
	if err := s.run(ctx, sb, "create", "--bundle", sb.Bundle(), "--pid-file", pidFile, id); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return nil, fmt.Errorf("read sandbox pid: %w", err)
	}
	if sb.Pid, err = strconv.Atoi(strings.TrimSpace(string(data))); err != nil {
		return nil, fmt.Errorf("sandbox pid file: %w", err)
	}
	if err := s.run(ctx, sb, "start", id); err != nil {
		return nil, err
	}
	// Booted: the sandbox runs at normal priority from now on.
	reniceTree(sb.Pid, 0)
	if err := sb.Save(filepath.Join(sb.Dir, stateFile)); err != nil {
		return nil, err
	}
	return sb, nil
}

// run runs gvx-sentry against sb's root.
func (s *Server) run(ctx context.Context, sb *Sandbox, args ...string) error {
	// Not cancelled with ctx: a create killed halfway leaves processes no
	// record names; a finished boot is destroyed by drain instead.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, s.sentry, append([]string{"--root", sb.Root()}, args...)...)
	cmd.Env = append(os.Environ(), FlagsEnv+"="+s.flags)
	// The sandbox inherits create's stdio: a file, not a pipe, so that
	// nothing waits for the sandbox to close it.
	out, err := os.CreateTemp(sb.Dir, "sentry-*.log")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Start()
	if err == nil {
		// Boot in the background: at the lowest CPU priority, so that a
		// refill never slows the tasks running (or being adopted) now.
		_ = unix.Setpriority(unix.PRIO_PROCESS, cmd.Process.Pid, bootNice)
		err = cmd.Wait()
	}
	if err != nil {
		msg, _ := os.ReadFile(out.Name())
		return fmt.Errorf("gvx-sentry %s %s: %w: %s", args[0], sb.ID, err, strings.TrimSpace(string(msg)))
	}
	return nil
}

// bootNice is the CPU niceness sandboxes boot at.
const bootNice = 19

// reniceTree sets the niceness of every thread of pid and of its
// descendants (the Sentry and its stub processes).
func reniceTree(pid, nice int) {
	tids, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, t := range tids {
		tid, err := strconv.Atoi(filepath.Base(t))
		if err != nil {
			continue
		}
		_ = unix.Setpriority(unix.PRIO_PROCESS, tid, nice)
		data, _ := os.ReadFile(filepath.Join(t, "children"))
		for _, c := range strings.Fields(string(data)) {
			if child, err := strconv.Atoi(c); err == nil {
				reniceTree(child, nice)
			}
		}
	}
}

// request and response are the claim protocol: one JSON line each way.
type request struct {
	Class  string `json:"class"`
	Status bool   `json:"status,omitempty"` // report Status instead of claiming
}

type response struct {
	Sandbox *Sandbox `json:"sandbox,omitempty"`
	Status  *Status  `json:"status,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// Status is what a pool server reports about itself.
type Status struct {
	Class   string `json:"class"`
	Image   string `json:"image,omitempty"`
	Size    int    `json:"size"`
	Ready   int    `json:"ready"`
	Booted  int    `json:"booted"`  // since the server started
	Claimed int    `json:"claimed"` // since the server started
}

func (s *Server) status() *Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &Status{Class: s.class, Image: s.cfg.Pool.Image, Size: s.cfg.Pool.Size, Ready: len(s.ready), Booted: s.booted, Claimed: s.claimed}
}

func (s *Server) serveConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var req request
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&req); err != nil {
		_ = json.NewEncoder(conn).Encode(response{Error: fmt.Sprintf("bad claim: %v", err)})
		return
	}
	if req.Status {
		_ = json.NewEncoder(conn).Encode(response{Status: s.status()})
		return
	}
	sb, err := s.claim(req.Class)
	if err != nil {
		_ = json.NewEncoder(conn).Encode(response{Error: err.Error()})
		return
	}
	if err := json.NewEncoder(conn).Encode(response{Sandbox: sb}); err != nil {
		// The shim is gone: the sandbox is nobody's, destroy it.
		log.G(ctx).WithError(err).Warnf("gvx pool: claim of %s not delivered; destroying it", sb.ID)
		_ = sb.Destroy(ctx, s.sentry)
		return
	}
	log.G(ctx).Debugf("gvx pool: handed out %s", sb.ID)
}

// claim takes the oldest live ready sandbox of the class and marks it as a
// task's.
func (s *Server) claim(class string) (*Sandbox, error) {
	if class != s.class {
		return nil, fmt.Errorf("%w: the pool boots class %s, the task wants %s (its gvx config differs from the pool's)", ErrNoSandbox, s.class, class)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.ready) > 0 {
		sb := s.ready[0]
		s.ready = s.ready[1:]
		if !sb.Alive() {
			continue // pruneDead cleans it up
		}
		if err := os.WriteFile(filepath.Join(sb.Dir, claimedFile), nil, 0o600); err != nil {
			return nil, fmt.Errorf("mark %s claimed: %w", sb.ID, err)
		}
		s.lastClaim = time.Now()
		s.claimed++
		select {
		case s.wake <- struct{}{}:
		default:
		}
		return sb, nil
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil, fmt.Errorf("%w: all %d handed out, refilling", ErrNoSandbox, s.cfg.Pool.Size)
}

// Query asks the pool server at socket how it is doing.
func Query(ctx context.Context, socket string) (*Status, error) {
	var resp response
	if err := roundTrip(ctx, socket, request{Status: true}, &resp); err != nil {
		return nil, err
	}
	if resp.Error != "" || resp.Status == nil {
		return nil, fmt.Errorf("pool server %s: %s", socket, resp.Error)
	}
	return resp.Status, nil
}

// roundTrip sends req to the pool server at socket and decodes its answer.
func roundTrip(ctx context.Context, socket string, req request, resp *response) error {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("pool server %s: %w (start it with `gvx pool serve`)", socket, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return fmt.Errorf("pool server %s: %w", socket, err)
	}
	if err := json.NewDecoder(conn).Decode(resp); err != nil {
		return fmt.Errorf("pool server %s: %w", socket, err)
	}
	return nil
}

// ErrNoSandbox means the pool has no sandbox for the claim right now.
var ErrNoSandbox = errors.New("no pool sandbox ready")

// Claim asks the pool server at socket for a sandbox of class. The caller
// owns the sandbox it returns and must Destroy it.
func Claim(ctx context.Context, socket, class string) (*Sandbox, error) {
	var resp response
	if err := roundTrip(ctx, socket, request{Class: class}, &resp); err != nil {
		return nil, err
	}
	if resp.Error != "" {
		if strings.HasPrefix(resp.Error, ErrNoSandbox.Error()) {
			return nil, fmt.Errorf("%w%s", ErrNoSandbox, strings.TrimPrefix(resp.Error, ErrNoSandbox.Error()))
		}
		return nil, fmt.Errorf("claim from %s: %s", socket, resp.Error)
	}
	if resp.Sandbox == nil {
		return nil, fmt.Errorf("claim from %s: empty answer", socket)
	}
	return resp.Sandbox, nil
}
