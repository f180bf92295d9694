// Package dind runs Docker inside gvx sandboxes, on gvx's Go SDK.
//
// A docker-mode sandbox gets an ext4lite volume at /var/lib/docker; golden
// volumes have images preloaded, and episodes are cloned from them by
// reflink. It is the library behind `gvx golden build` and `gvx episode`:
// a thin layer on package gvx, which makes, runs and removes the
// sandboxes.
package dind

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/internal/dockerapi"
)

// DockerRoot is where the volume is mounted in the sandbox.
const DockerRoot = "/var/lib/docker"

// labelVolume keeps a sandbox's /var/lib/docker volume (for Attach).
const labelVolume = "gvx-dind.volume"

// Docker is a client of a sandbox's inner dockerd (Engine API over its
// host socket).
type Docker = dockerapi.Client

// NewDocker returns a client for the dockerd listening on socket.
func NewDocker(socket string) *Docker { return dockerapi.New(socket) }

// Runner starts docker-mode sandboxes through an SDK client.
type Runner struct {
	Client *gvx.Client
	// Progress, if set, receives one line per step.
	Progress io.Writer
	// Network and NAT are every sandbox's network (gvx.Config's:
	// empty is loopback only; gvx.NetworkNAT lets dockerd pull through
	// the sandbox's NAT and publish `docker run -p` ports on the host).
	Network gvx.NetworkMode
	NAT     *gvx.NAT
	// Env is added to every sandbox's environment (gvx's dind image
	// passes GVX_DOCKERD_ARGS to dockerd, e.g.
	// "--insecure-registry=10.0.2.2:5000").
	Env []string
}

func (r *Runner) logf(format string, a ...any) {
	if r.Progress != nil {
		fmt.Fprintf(r.Progress, format+"\n", a...)
	}
}

// Sandbox is a running docker-mode sandbox.
type Sandbox struct {
	ID     string
	Volume string
	Docker *Docker
	// SDK is the sandbox as gvx's SDK has it.
	SDK *gvx.Sandbox
	// Timings of Start: the task was created and started (Up) and dockerd
	// answered (Ready), both measured from the call.
	Up, Ready time.Duration
}

// Start runs image (a reference in the client's containerd, or an image
// archive) as sandbox id with volume (an ext4 image file) at
// /var/lib/docker, in docker mode, and waits until its dockerd answers.
func (r *Runner) Start(ctx context.Context, id, image, volume string) (*Sandbox, error) {
	abs, err := filepath.Abs(volume)
	if err != nil {
		return nil, err
	}
	sb, err := r.Client.New(ctx, gvx.Config{
		ID: id, Image: image, Docker: true, Env: r.Env, Network: r.Network, NAT: r.NAT,
		Mounts: []gvx.Mount{{Type: gvx.MountVolume, Source: abs, Target: DockerRoot}},
		Labels: map[string]string{labelVolume: abs},
	})
	if err != nil {
		return nil, err
	}
	t := sb.Timings()
	up := t.Image + t.Volumes + t.Create + t.Start
	return &Sandbox{ID: id, Volume: abs, SDK: sb, Docker: NewDocker(sb.DockerSocket()), Up: up, Ready: up + t.Docker}, nil
}

// Attach returns the docker-mode sandbox id, e.g. one started by an
// earlier process.
func (r *Runner) Attach(ctx context.Context, id string) (*Sandbox, error) {
	sb, err := r.Client.Attach(ctx, id)
	if err != nil {
		return nil, err
	}
	vol := sb.Labels()[labelVolume]
	if filepath.Base(vol) == goldenSeedVolume && strings.HasSuffix(filepath.Dir(vol), goldenCheckpointSuffix) {
		// Restored from a golden checkpoint: the label is its seed's,
		// the volume the checkpoint store's copy (removed with it).
		vol = ""
	}
	return &Sandbox{ID: id, Volume: vol, SDK: sb, Docker: NewDocker(sb.DockerSocket())}, nil
}

// Stop asks the sandbox's init to stop dockerd cleanly (SIGTERM), waits up
// to grace, and closes the sandbox (killing what is left).
func (s *Sandbox) Stop(ctx context.Context, grace time.Duration) error {
	if err := s.SDK.Signal(ctx, syscall.SIGTERM); err != nil && !errors.Is(err, gvx.ErrNotFound) && !errors.Is(err, gvx.ErrNotRunning) {
		return fmt.Errorf("stop sandbox %s: %w", s.ID, err)
	}
	select {
	case <-s.SDK.Exited():
	case <-time.After(grace):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.SDK.Close(ctx)
}

// Kill ends the sandbox at once and removes it.
func (s *Sandbox) Kill(ctx context.Context) error { return s.SDK.Close(ctx) }

// Exec runs args inside the sandbox (not in an inner container) and
// returns its exit code; output goes to stdout and stderr.
func (s *Sandbox) Exec(ctx context.Context, stdout, stderr io.Writer, args ...string) (int, error) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	res, err := s.SDK.Exec(ctx, args, gvx.ExecOptions{Stdout: stdout, Stderr: stderr})
	return res.ExitCode, err
}
