// Package dind runs Docker inside gvx sandboxes through containerd.
//
// A docker-mode sandbox gets an ext4lite volume at /var/lib/docker; golden
// volumes have images preloaded, and episodes are cloned from them by
// reflink.
// It is the library behind `gvx golden build` and `gvx episode`, and the
// seed of gvx's Go SDK.
package dind

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
)

// DefaultRuntime is gvx's containerd runtime.
const DefaultRuntime = api.RuntimeType

// DockerRoot is where the volume is mounted in the sandbox.
const DockerRoot = "/var/lib/docker"

// Runner starts docker-mode sandboxes through a containerd client.
type Runner struct {
	Client *client.Client
	// Runtime defaults to DefaultRuntime; RuntimeOptions are passed as is
	// (e.g. runtimeoptions with a ConfigPath).
	Runtime        string
	RuntimeOptions any
	// StateDir is gvx's state_dir (default /run/gvx): the docker socket of
	// task <id> in namespace <ns> is StateDir/docker/<ns>/<id>/docker.sock.
	StateDir string
	// Progress, if set, receives one line per step.
	Progress io.Writer
}

func (r *Runner) logf(format string, a ...any) {
	if r.Progress != nil {
		fmt.Fprintf(r.Progress, format+"\n", a...)
	}
}

// SocketPath is where the host reaches the dockerd of task id.
func (r *Runner) SocketPath(ns, id string) string {
	dir := r.StateDir
	if dir == "" {
		dir = api.DefaultStateDir
	}
	return api.Layout{Dir: dir}.DockerSocket(ns, id)
}

// Sandbox is a running docker-mode sandbox.
type Sandbox struct {
	ID        string
	Namespace string // containerd namespace; used when a ctx carries none
	Volume    string
	Docker    *Docker
	// Timings of Start: the task was created and started (Up) and dockerd
	// answered (Ready), both measured from the call.
	Up, Ready time.Duration

	container client.Container
	task      client.Task
	exit      <-chan client.ExitStatus
}

// Start runs image as sandbox id with volume (an ext4 image file) at
// /var/lib/docker, in docker mode, and waits until its dockerd answers.
func (r *Runner) Start(ctx context.Context, id, image, volume string) (_ *Sandbox, retErr error) {
	t0 := time.Now()
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, err
	}
	img, err := r.Client.GetImage(ctx, image)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("image %s is not in containerd namespace %q: import it first (ctr -n %s images import dind.tar, or make images)", image, ns, ns)
		}
		return nil, fmt.Errorf("image %s: %w", image, err)
	}
	if ok, err := img.IsUnpacked(ctx, ""); err != nil || !ok {
		if err := img.Unpack(ctx, ""); err != nil {
			return nil, fmt.Errorf("unpack %s: %w", image, err)
		}
	}
	runtime := r.Runtime
	if runtime == "" {
		runtime = DefaultRuntime
	}
	abs, err := filepath.Abs(volume)
	if err != nil {
		return nil, err
	}
	cont, err := r.Client.NewContainer(ctx, id,
		client.WithNewSnapshot(id, img),
		client.WithNewSpec(oci.WithImageConfig(img),
			oci.WithAnnotations(map[string]string{api.AnnotationDocker: "true"}),
			oci.WithMounts([]specs.Mount{{Destination: DockerRoot, Type: "ext4", Source: abs, Options: []string{"rw"}}})),
		client.WithRuntime(runtime, r.RuntimeOptions))
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	defer func() {
		if retErr != nil {
			_ = cont.Delete(context.WithoutCancel(ctx), client.WithSnapshotCleanup)
		}
	}()
	task, err := cont.NewTask(ctx, cio.NullIO)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	s := &Sandbox{ID: id, Namespace: ns, Volume: abs, container: cont, task: task, Docker: NewDocker(r.SocketPath(ns, id))}
	defer func() {
		if retErr != nil {
			_, _ = task.Delete(context.WithoutCancel(ctx), client.WithProcessKill)
		}
	}()
	if s.exit, err = task.Wait(ctx); err != nil {
		return nil, err
	}
	if err := task.Start(ctx); err != nil {
		return nil, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	s.Up = time.Since(t0)
	err = s.Docker.WaitReady(ctx, func() error {
		select {
		case st := <-s.exit:
			return fmt.Errorf("sandbox %s exited (status %d) before dockerd was ready: run it with the task's output attached to see why", id, st.ExitCode())
		default:
			return nil
		}
	})
	if err != nil {
		return nil, err
	}
	s.Ready = time.Since(t0)
	return s, nil
}

// Stop asks the sandbox's init to stop dockerd cleanly (SIGTERM), waits up
// to grace, kills it after that, and deletes the task and container.
func (s *Sandbox) Stop(ctx context.Context, grace time.Duration) error {
	ctx = s.nsContext(ctx)
	if err := s.task.Kill(ctx, syscall.SIGTERM); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("stop sandbox %s: %w", s.ID, err)
	}
	select {
	case <-s.exit:
	case <-time.After(grace):
		_ = s.task.Kill(ctx, syscall.SIGKILL)
		<-s.exit
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.delete(ctx)
}

// Kill ends the sandbox at once and deletes the task and container.
func (s *Sandbox) Kill(ctx context.Context) error {
	ctx = s.nsContext(ctx)
	if err := s.task.Kill(ctx, syscall.SIGKILL); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("kill sandbox %s: %w", s.ID, err)
	}
	<-s.exit
	return s.delete(ctx)
}

// nsContext gives ctx the sandbox's namespace unless it has one.
func (s *Sandbox) nsContext(ctx context.Context) context.Context {
	if _, ok := namespaces.Namespace(ctx); !ok && s.Namespace != "" {
		return namespaces.WithNamespace(ctx, s.Namespace)
	}
	return ctx
}

func (s *Sandbox) delete(ctx context.Context) error {
	if _, err := s.task.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete sandbox %s: %w", s.ID, err)
	}
	if err := s.container.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete container %s: %w", s.ID, err)
	}
	return nil
}

// Exec runs args inside the sandbox (not in an inner container) and
// returns its exit code; output goes to stdout and stderr.
func (s *Sandbox) Exec(ctx context.Context, execID string, stdout, stderr io.Writer, args ...string) (int, error) {
	ctx = s.nsContext(ctx)
	spec, err := s.container.Spec(ctx)
	if err != nil {
		return -1, err
	}
	p := *spec.Process
	p.Args = args
	p.Terminal = false
	proc, err := s.task.Exec(ctx, execID, &p, cio.NewCreator(cio.WithStreams(nil, stdout, stderr)))
	if err != nil {
		return -1, fmt.Errorf("exec in %s: %w", s.ID, err)
	}
	defer func() { _, _ = proc.Delete(context.WithoutCancel(ctx)) }()
	ch, err := proc.Wait(ctx)
	if err != nil {
		return -1, err
	}
	if err := proc.Start(ctx); err != nil {
		return -1, fmt.Errorf("exec in %s: %w", s.ID, err)
	}
	select {
	case st := <-ch:
		proc.IO().Wait()
		return int(st.ExitCode()), st.Error()
	case <-ctx.Done():
		_ = proc.Kill(context.WithoutCancel(ctx), syscall.SIGKILL)
		return -1, ctx.Err()
	}
}

// waitDetached waits until no loop device is backed by path any more: the
// sandbox's mount namespace, and with it the volume's mount, goes away
// asynchronously after the task is deleted.
func waitDetached(ctx context.Context, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		attached := false
		files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == abs {
				attached = true
			}
		}
		if !attached {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("volume still attached to a loop device 15 s after its sandbox was deleted")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Attach returns the running (or stopped) docker-mode sandbox id, e.g. one
// started by an earlier process.
func (r *Runner) Attach(ctx context.Context, id string) (*Sandbox, error) {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, err
	}
	cont, err := r.Client.LoadContainer(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	spec, err := cont.Spec(ctx)
	if err != nil {
		return nil, err
	}
	s := &Sandbox{ID: id, Namespace: ns, container: cont, Docker: NewDocker(r.SocketPath(ns, id))}
	for _, m := range spec.Mounts {
		if m.Destination == DockerRoot && m.Type == "ext4" {
			s.Volume = m.Source
		}
	}
	task, err := cont.Task(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s has no task: %w", id, err)
	}
	s.task = task
	if s.exit, err = task.Wait(ctx); err != nil {
		return nil, err
	}
	return s, nil
}
