package gvx

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/internal/cgroups"
	"github.com/gvxrun/gvx/internal/embedded"
	"github.com/gvxrun/gvx/internal/image"
	"github.com/gvxrun/gvx/rollout"
	"github.com/gvxrun/gvx/sandbox"
)

// Defaults of Options.
const (
	DefaultNamespace   = "gvx"
	DefaultStateDir    = api.SDKStateDir
	DefaultDataDir     = "/var/lib/gvx/sdk"
	DefaultSnapshotter = "overlayfs"
)

// Options configure a Client.
type Options struct {
	// Containerd is the socket of a running containerd that has gvx's
	// runtime. Empty: the embedded containerd under StateDir and DataDir,
	// started if it does not run, and stopped by the last client to close
	// while it has no sandbox left.
	Containerd string
	// Namespace is the containerd namespace of the sandboxes (default
	// "gvx").
	Namespace string
	// RuntimeConfig is the gvx config file the sandboxes run with
	// (default /etc/gvx/config.toml if present, else gvx's defaults).
	RuntimeConfig string
	// BinDir holds gvx's binaries: containerd-shim-gvx-v2 and gvx-sentry,
	// and gvx (the CLI), which serves the embedded containerd and pools.
	// Default: the running program's directory if the shim is there, else
	// the directory of containerd-shim-gvx-v2 on PATH.
	BinDir string
	// StateDir holds the client's runtime files: the embedded
	// containerd's sockets and state, stdio fifos, pools, published
	// sockets (default /run/gvx/sdk). DataDir holds the embedded
	// containerd's images and snapshots (default /var/lib/gvx/sdk).
	StateDir, DataDir string
	// Snapshotter unpacks images (default overlayfs).
	Snapshotter string
	// CheckpointDir is the store of checkpoints (default
	// DataDir/checkpoints); put it on the volumes' filesystem (XFS or
	// btrfs) so that volume copies are reflinks and each checkpoint's
	// memory shares storage with its parent's where unchanged.
	CheckpointDir string
	// Spares is how many restored, paused sandboxes are kept ready for
	// each checkpoint, so that a Rollback or Fork to it is two control
	// calls (≈ 1 ms) instead of a restore (≈ 0.2–0.5 s). Each costs a
	// sandbox's memory. Default 0.
	Spares int
	// LazyLabels makes Rollback return once the restored sandbox runs,
	// before containerd has committed it as the sandbox's (an fsync:
	// ≈ 2 ms, 10 ms and more on a busy disk); the next call on the
	// sandbox waits for that. Until then another process — or this one's
	// successor, if it died in that window — finds the sandbox as it was
	// before the rollback. Default false: Rollback waits.
	LazyLabels bool
	// NoDedupe: checkpoints' memory is not deduplicated against their
	// parents' (which costs the CPU of reading both, in the background;
	// docs/checkpoint.md).
	NoDedupe bool
	// NoRestoreTargets: a rollback or fork without a ready spare boots a
	// sandbox for its restore then. By default, once a sandbox has a
	// checkpoint, one sandbox booted ahead from its spec waits (an idle
	// sandbox's memory) and such a rollback restores into it, ≈ 2× as
	// fast (rollout.Options.NoTargets, docs/checkpoint.md).
	NoRestoreTargets bool
	// Progress, if set, receives a line for each long step: starting
	// containerd, importing and unpacking images, cloning volumes,
	// waiting for dockerd.
	Progress io.Writer
}

// Client is a connection to containerd, through which sandboxes are made
// and found.
type Client struct {
	opts     Options
	ctrd     *client.Client
	daemon   *embedded.Daemon
	cfg      config.Config // the gvx runtime config sandboxes get by default
	fifoDir  string
	images   imageCache
	closeMu  sync.Mutex
	closed   bool
	progress sync.Mutex
	engOnce  sync.Once
	eng      *rollout.Engine // checkpoints, rollbacks and forks (made on first use)
	engErr   error
}

// Connect connects to containerd, starting the embedded one if
// Options.Containerd is empty and it does not run yet.
func Connect(ctx context.Context, o Options) (*Client, error) {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.DataDir == "" {
		o.DataDir = DefaultDataDir
	}
	if o.Snapshotter == "" {
		o.Snapshotter = DefaultSnapshotter
	}
	cfg, err := config.Load(o.RuntimeConfig)
	if err != nil {
		return nil, newError("connect", "", ErrInvalid, err)
	}
	c := &Client{opts: o, cfg: cfg, fifoDir: filepath.Join(o.StateDir, "fifo")}
	if o.Containerd == "" {
		bin, err := c.binDir()
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		d, err := embedded.Start(ctx, embedded.Config{
			StateDir: filepath.Join(o.StateDir, "containerd"),
			DataDir:  filepath.Join(o.DataDir, "containerd"),
			Binary:   filepath.Join(bin, api.CLIBinary),
			Path:     bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		})
		if err != nil {
			return nil, newError("connect", "", ErrUnavailable, err)
		}
		if d.Started() && time.Since(t0) > time.Second {
			c.progressf("started the embedded containerd in %s (%s)", o.StateDir, time.Since(t0).Round(time.Millisecond))
		}
		c.daemon = d
		o.Containerd = d.Address()
		c.opts.Containerd = o.Containerd
	}
	c.ctrd, err = client.New(o.Containerd, client.WithDefaultNamespace(o.Namespace), client.WithTimeout(10*time.Second))
	if err != nil {
		if c.daemon != nil {
			_ = c.daemon.Close(context.WithoutCancel(ctx), nil)
		}
		return nil, errorf("connect", "", ErrUnavailable, "containerd at %s: %w (is it running? set Options.Containerd, or leave it empty for the embedded one)", o.Containerd, err)
	}
	if err := os.MkdirAll(c.fifoDir, 0o700); err != nil {
		_ = c.Close(ctx)
		return nil, newError("connect", "", ErrUnavailable, err)
	}
	return c, nil
}

// Close releases the connection. Sandboxes stay as they are (another
// client can Attach them); an embedded containerd is stopped if no other
// client uses it and it has no sandbox left.
func (c *Client) Close(ctx context.Context) error {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var err error
	if c.eng != nil {
		// Its spares are containers of its own.
		if eerr := c.eng.Close(c.Context(ctx)); eerr != nil {
			log.G(ctx).WithError(eerr).Warn("gvx: closing the checkpoint engine")
		}
	}
	if c.daemon != nil {
		err = c.daemon.Close(ctx, c.idle)
		// The namespace's cgroup its tasks' cgroups were made in, once
		// the last of them is gone (other clients' tasks keep it).
		cgroups.RemoveIfEmpty(ctx, "/"+c.opts.Namespace)
	}
	if c.ctrd != nil {
		_ = c.ctrd.Close()
	}
	_ = os.Remove(c.fifoDir) // only if empty: other clients share it
	// The gofers' shared network namespace pin, once the node has no
	// sandbox left (as `gvx gc` does): `gvx run --rm` leaves nothing.
	sandbox.UnpinIfIdle(c.cfg.Layout())
	if err != nil {
		return newError("close", "", ErrUnavailable, err)
	}
	return nil
}

// idle reports whether containerd has no container in any namespace.
func (c *Client) idle(ctx context.Context) (bool, error) {
	nss, err := c.ctrd.NamespaceService().List(ctx)
	if err != nil {
		return false, err
	}
	for _, ns := range nss {
		conts, err := c.ctrd.Containers(namespaces.WithNamespace(ctx, ns))
		if err != nil {
			return false, err
		}
		if len(conts) > 0 {
			return false, nil
		}
	}
	return true, nil
}

// Address is the containerd socket the client talks to.
func (c *Client) Address() string { return c.opts.Containerd }

// Namespace is the containerd namespace of the client's sandboxes.
func (c *Client) Namespace() string { return c.opts.Namespace }

// Containerd is the underlying containerd client, for what the SDK does
// not cover. Calls need the namespace in their context (Context).
func (c *Client) Containerd() *client.Client { return c.ctrd }

// Context returns ctx in the client's namespace.
func (c *Client) Context(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, c.opts.Namespace)
}

// imageCache is the client's image resolver, made on first use.
type imageCache struct {
	once sync.Once
	r    *image.Resolver
}

func (c *Client) resolver() *image.Resolver {
	c.images.once.Do(func() {
		c.images.r = &image.Resolver{Client: c.ctrd, Snapshotter: c.opts.Snapshotter, Progress: c.progressf}
	})
	return c.images.r
}

// binDir finds gvx's binaries (Options.BinDir).
func (c *Client) binDir() (string, error) {
	if c.opts.BinDir != "" {
		if _, err := os.Stat(filepath.Join(c.opts.BinDir, api.ShimBinary)); err != nil {
			return "", errorf("connect", "", ErrUnavailable, "Options.BinDir %s: %w: it must hold gvx's binaries (make build; make install)", c.opts.BinDir, err)
		}
		return c.opts.BinDir, nil
	}
	if self, err := os.Executable(); err == nil {
		if _, err := os.Stat(filepath.Join(filepath.Dir(self), api.ShimBinary)); err == nil {
			return filepath.Dir(self), nil
		}
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, api.ShimBinary)); err == nil {
			c.opts.BinDir = dir
			return dir, nil
		}
	}
	return "", errorf("connect", "", ErrUnavailable, "%s not found next to this program or on PATH: install gvx (make install) or set Options.BinDir", api.ShimBinary)
}

// progressf writes one progress line.
func (c *Client) progressf(format string, a ...any) {
	if c.opts.Progress == nil {
		return
	}
	c.progress.Lock()
	defer c.progress.Unlock()
	fmt.Fprintf(c.opts.Progress, "gvx: "+format+"\n", a...)
}

// shared is the client New and the package-level functions use, held
// while any sandbox made through it is open.
var shared struct {
	sync.Mutex
	c    *Client
	refs int
}

// EnvOptions are the Options the environment gives, as the gvx CLI's
// sandbox commands read them: GVX_CONTAINERD (a containerd socket; unset:
// the embedded one), GVX_NAMESPACE, GVX_RUNTIME_CONFIG, GVX_BIN_DIR,
// GVX_STATE_DIR and GVX_DATA_DIR. Unset ones are the defaults.
func EnvOptions() Options {
	return Options{
		Containerd:    os.Getenv("GVX_CONTAINERD"),
		Namespace:     os.Getenv("GVX_NAMESPACE"),
		RuntimeConfig: os.Getenv("GVX_RUNTIME_CONFIG"),
		BinDir:        os.Getenv("GVX_BIN_DIR"),
		StateDir:      os.Getenv("GVX_STATE_DIR"),
		DataDir:       os.Getenv("GVX_DATA_DIR"),
	}
}

// acquireShared returns the shared client, connecting it if needed.
func acquireShared(ctx context.Context) (*Client, error) {
	shared.Lock()
	defer shared.Unlock()
	if shared.c == nil {
		c, err := Connect(ctx, EnvOptions())
		if err != nil {
			return nil, err
		}
		shared.c = c
	}
	shared.refs++
	return shared.c, nil
}

// releaseShared drops one reference; the last closes the client.
func releaseShared(ctx context.Context) error {
	shared.Lock()
	defer shared.Unlock()
	shared.refs--
	if shared.refs > 0 || shared.c == nil {
		return nil
	}
	c := shared.c
	shared.c = nil
	return c.Close(ctx)
}

// New makes and starts a sandbox through a client with EnvOptions (by
// default the embedded containerd), shared by the sandboxes New makes and
// closed with the last of them. Programs that make many sandboxes, or need other
// Options, use Connect and Client.New.
func New(ctx context.Context, cfg Config) (*Sandbox, error) {
	c, err := acquireShared(ctx)
	if err != nil {
		return nil, err
	}
	sb, err := c.New(ctx, cfg)
	if err != nil {
		_ = releaseShared(ctx)
		return nil, err
	}
	sb.onClose = releaseShared
	return sb, nil
}
