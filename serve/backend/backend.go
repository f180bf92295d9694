// Package backend is what gvx serve needs from sandboxes.
//
// The service's handlers (the E2B control plane, envd, gvx's own routes)
// are written against these interfaces; `gvx serve` runs them on gvx's Go
// SDK (package serve/gvxbackend), and unit tests of the protocol packages
// on fakes.
package backend

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
)

// Template is how a sandbox is made: an image and what it runs with.
type Template struct {
	// Name is the template's id and alias (E2B's templateID).
	Name string `json:"name" toml:"name"`
	// Image is a containerd image reference or an image archive path.
	Image string `json:"image" toml:"image"`
	// Cmd is the sandbox's init (default: sleep forever).
	Cmd []string `json:"cmd,omitempty" toml:"cmd"`
	// Env is K=V for every command of the sandbox.
	Env []string `json:"env,omitempty" toml:"env"`
	// User is the default user of commands and files (default "user"),
	// Workdir their default directory (default the user's home).
	User    string `json:"user,omitempty" toml:"user"`
	Workdir string `json:"workdir,omitempty" toml:"workdir"`
	// Resources; zero means the gvx defaults.
	MemoryMB  int64 `json:"memoryMB,omitempty" toml:"memory_mb"`
	CPUMillis int64 `json:"cpuMillis,omitempty" toml:"cpu_millis"`
	DiskMB    int64 `json:"diskMB,omitempty" toml:"disk_mb"`
	// Docker runs the sandbox in docker mode; Golden, if set, is a golden
	// ext4lite volume cloned per sandbox to /var/lib/docker.
	Docker bool   `json:"docker,omitempty" toml:"docker"`
	Golden string `json:"golden,omitempty" toml:"golden"`
	// Network is the sandboxes' network: "none" (the default: loopback
	// only) or "nat" (eth0 behind each sandbox's own userspace NAT:
	// docs/network.md); NAT, with "nat", its settings (unset fields: the
	// gvx config's [nat]).
	Network string `json:"network,omitempty" toml:"network"`
	NAT     *NAT   `json:"nat,omitempty" toml:"nat"`
	// PoolSize sandboxes are kept booted for this template (0: none).
	PoolSize int `json:"poolSize,omitempty" toml:"pool_size"`
	// Hot of the pool's sandboxes are kept acquired ahead of creates, so
	// that a create is a hand-over, not a pool's acquire. Nil: 1 when the
	// template has a pool; 0: none.
	Hot *int `json:"hot,omitempty" toml:"hot"`
	// Checkpointable: the pool's sandboxes can be checkpointed (gvx's
	// checkpoint, rollback and fork routes, E2B's fork): the pool is a
	// plain one, whose acquire creates the sandbox's container, rather
	// than an image pool's, whose sandboxes cannot be checkpointed. Only
	// meaningful with a pool (a sandbox booted at create can be).
	Checkpointable bool `json:"checkpointable,omitempty" toml:"checkpointable"`
	// Lease serves the template's sandboxes as leases of its pool
	// (gvx.PoolConfig.Leases; PoolSize > 0): a create takes a booted
	// sandbox with no containerd task made for it, its commands start
	// through the sandbox's control socket, and a kill resets it and
	// hands it to the next create. Not with Docker, Golden, Cmd or
	// Checkpointable; its sandboxes end with the service's process.
	Lease bool `json:"lease,omitempty" toml:"lease"`
}

// Network modes of a Template.
const (
	NetworkNone = "none"
	NetworkNAT  = "nat"
)

// NAT is a template's NAT: the egress policy, resolvers and limits
// (docs/network.md). Templates publish no ports: every sandbox of a
// template would want the same host port.
type NAT struct {
	Egress *Egress `json:"egress,omitempty" toml:"egress"`
	// DNS lists the resolvers (ADDR:PORT) 10.0.2.3 forwards to.
	DNS []string `json:"dns,omitempty" toml:"dns"`
	// MaxConnections caps each sandbox's open flows; 0: the config's.
	MaxConnections int `json:"max_connections,omitempty" toml:"max_connections"`
	// Bandwidth caps each sandbox's bytes per second each way ("8M");
	// empty: the config's.
	Bandwidth string `json:"bandwidth,omitempty" toml:"bandwidth"`
}

// BandwidthBytes is n.Bandwidth in bytes per second (0: unset).
func (n *NAT) BandwidthBytes() (int64, error) {
	if n == nil {
		return 0, nil
	}
	return config.ParseBandwidth(n.Bandwidth)
}

// Egress is a template's egress policy (api.Egress).
type Egress struct {
	Default string   `json:"default,omitempty" toml:"default"`
	Allow   []string `json:"allow,omitempty" toml:"allow"`
	Deny    []string `json:"deny,omitempty" toml:"deny"`
}

// HotSize is how many sandboxes of t are kept acquired ahead of creates
// (Template.Hot).
func (t Template) HotSize() int {
	switch {
	case t.PoolSize == 0 || t.Lease:
		return 0
	case t.Hot == nil:
		return 1
	}
	return *t.Hot
}

// Backend makes and finds sandboxes.
type Backend interface {
	// Create starts sandbox id ([a-z0-9]+) from t, as o asks, and
	// returns once it runs commands.
	Create(ctx context.Context, id string, t Template, o CreateOptions) (Sandbox, error)
	// Attach returns sandbox id, made by an earlier process of the
	// service from t, if it still runs; ErrNotFound if it does not.
	Attach(ctx context.Context, id string, t Template) (Sandbox, error)
	// Destroy removes whatever is left of sandbox id (running or not) by
	// id alone; nil if nothing is.
	Destroy(ctx context.Context, id string) error
	// List returns the ids of every sandbox the backend has, so that the
	// service can remove those its table does not know.
	List(ctx context.Context) ([]string, error)
	// Close releases the backend (not its sandboxes).
	Close() error
}

// CreateOptions are what one create asks beyond its template.
type CreateOptions struct {
	// Env (K=V) is added to the template's.
	Env []string
	// Narrow, if set, narrows a NAT template's egress policy for this
	// sandbox (E2B's allow_internet_access and network.allowOut/denyOut):
	// a sandbox booted ahead (a pool's, a hot one) gets it before the
	// create returns.
	Narrow *api.Narrow
}

// Sandbox is one running sandbox.
type Sandbox interface {
	// Exec starts a command. The process is killed when ctx is done.
	Exec(ctx context.Context, c Cmd) (Process, error)
	// Pause freezes every process of the sandbox; Resume thaws them.
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	// Stats is the sandbox's resource use now.
	Stats(ctx context.Context) (Stats, error)
	// Close kills the sandbox and releases everything it holds.
	Close(ctx context.Context) error
}

// Cmd is a command to run in a sandbox.
type Cmd struct {
	Args []string
	Env  []string // K=V, added to the sandbox's
	Dir  string
	User string // a user name or uid[:gid] of the image
	// Stdin, if set, is the process's standard input (nil: /dev/null).
	Stdin io.Reader
	// Stdout and Stderr receive the output as it comes (nil: discarded).
	Stdout, Stderr io.Writer
	// Tty runs the process on a terminal of Cols×Rows; its output is
	// Stdout's.
	Tty        bool
	Cols, Rows uint32
	// Timeout, if positive, kills the process after that long.
	Timeout time.Duration
}

// Process is a running command.
type Process interface {
	// Signal sends sig to the process; ErrEnded if it has ended.
	Signal(ctx context.Context, sig syscall.Signal) error
	// Resize changes a terminal's size.
	Resize(ctx context.Context, cols, rows uint32) error
	// Wait waits for the process to end and its output to be written:
	// its exit code, 128+n for a death by signal n.
	Wait(ctx context.Context) (int, error)
}

// Stats is a sandbox's resource use.
type Stats struct {
	CPUUsedPct                  float64
	MemUsed, MemTotal, MemCache int64
	DiskUsed, DiskTotal         int64
	CPUCount                    int
}

// ErrNotFound says a sandbox is not there (any more).
var ErrNotFound = errors.New("sandbox not found")

// ErrEnded says a process has ended (its end may not have been waited
// for yet).
var ErrEnded = errors.New("the process has ended")

// ErrUnsupported says the backend cannot do what was asked.
var ErrUnsupported = errors.New("not supported by this backend")

// Preparer is a Backend that prepares templates ahead of creates (imports
// the image, fills the template's pool).
type Preparer interface {
	// Prepare makes t ready; an error says why t cannot be used.
	Prepare(ctx context.Context, t Template) error
	// Forget releases what Prepare holds for template name.
	Forget(ctx context.Context, name string)
}

// PoolStatus is a template's pool's fill level: Ready of Size booted,
// and HotReady of Hot acquired ahead of creates.
type PoolStatus struct {
	Size     int `json:"size"`
	Ready    int `json:"ready"`
	Hot      int `json:"hot"`
	HotReady int `json:"hotReady"`
}

// PoolReporter is a Backend that can say how full a template's pool is.
type PoolReporter interface {
	// PoolStatus is template name's pool's fill level; ok is false if it
	// has no pool.
	PoolStatus(ctx context.Context, name string) (st PoolStatus, ok bool, err error)
}

// Checkpoint is a saved state of a sandbox (processes, files, volumes).
type Checkpoint struct {
	ID string
	// Parent is the checkpoint the state descends from ("" for a
	// sandbox's first).
	Parent  string
	Created time.Time
}

// Checkpointer is a Sandbox that can be checkpointed and rolled back.
type Checkpointer interface {
	// Checkpoint saves the sandbox's state; with async it returns once
	// the sandbox is paused and the save goes on (the sandbox's next
	// call waits for it).
	Checkpoint(ctx context.Context, async bool) (Checkpoint, error)
	// Rollback returns the sandbox to checkpoint id's state.
	Rollback(ctx context.Context, id string) error
}

// Narrower is a Sandbox whose NAT's egress narrowing can change while it
// runs.
type Narrower interface {
	// NarrowEgress replaces the narrowing (nil: none); new flows obey
	// it at once.
	NarrowEgress(ctx context.Context, n *api.Narrow) error
}

// PortDialer is a Sandbox whose guest's TCP ports the service can reach
// (E2B's sandbox URLs, <port>-<id>.<domain>).
type PortDialer interface {
	// DialPort connects to the guest's TCP port.
	DialPort(ctx context.Context, port int) (net.Conn, error)
}

// Identified is a Sandbox that knows its backend's id for it.
type Identified interface {
	BackendID() string
}

// Forker is a Backend that makes sandboxes from checkpoints.
type Forker interface {
	// Fork makes n sandboxes in checkpoint id's state. Each has an id of
	// the backend's, which its BackendID method (Identified) gives: the
	// service records it, and a later service Attaches by it.
	Fork(ctx context.Context, id string, n int) ([]Sandbox, error)
	// ReleaseCheckpoint deletes checkpoint id (ErrNoCheckpoint if there
	// is none).
	ReleaseCheckpoint(ctx context.Context, id string) error
	// Checkpoints lists the ids of the checkpoints the backend keeps.
	Checkpoints(ctx context.Context) ([]string, error)
}

// Errors of checkpoints.
var (
	// ErrNoCheckpoint: no such checkpoint (never made, or released).
	ErrNoCheckpoint = errors.New("checkpoint not found")
	// ErrForeignCheckpoint: the checkpoint is of another sandbox's tree.
	ErrForeignCheckpoint = errors.New("checkpoint of another sandbox")
	// ErrNotCheckpointable: the sandbox holds what cannot be saved (the
	// message says what); it runs on untouched.
	ErrNotCheckpointable = errors.New("sandbox cannot be checkpointed")
)
