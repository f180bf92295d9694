package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/gvxrun/gvx/api"
)

var nullIO = cio.NullIO

// start runs args as container id (gvx's runtime unless given; more
// added to its spec) and waits until it has written /tmp/ready.
func (x *env) start(ctx context.Context, id string, args []string, opts any, runtime string, more ...oci.SpecOpts) error {
	if runtime == "" {
		runtime = api.RuntimeType
	}
	cont, err := x.c.NewContainer(ctx, id, client.WithNewSnapshot(id, x.img),
		client.WithNewSpec(append([]oci.SpecOpts{oci.WithImageConfig(x.img), oci.WithProcessArgs(args...), oci.WithDevShmSize(shmKiB)}, more...)...), client.WithRuntime(runtime, opts))
	if err != nil {
		return err
	}
	task, err := cont.NewTask(ctx, nullIO)
	if err != nil {
		_ = cont.Delete(ctx, client.WithSnapshotCleanup)
		return err
	}
	if err := task.Start(ctx); err != nil {
		stop(ctx, cont)
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := execOut(ctx, task, "cat", "/tmp/ready")
		if err == nil && strings.TrimSpace(out) == "ready" {
			return nil
		}
		if time.Now().After(deadline) {
			stop(ctx, cont)
			return fmt.Errorf("%s never got ready: %q, %v", id, out, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var execSeq int

// execOut runs args in task and returns its stdout; a non-zero exit is an
// error.
func execOut(ctx context.Context, task client.Task, args ...string) (string, error) {
	spec, err := task.Spec(ctx)
	if err != nil {
		return "", err
	}
	p := *spec.Process
	p.Args, p.Terminal = args, false
	execSeq++
	var out strings.Builder
	proc, err := task.Exec(ctx, fmt.Sprintf("x%d", execSeq), &p, cio.NewCreator(cio.WithStreams(nil, &out, io.Discard)))
	if err != nil {
		return "", err
	}
	defer proc.Delete(ctx)
	wait, err := proc.Wait(ctx)
	if err != nil {
		return "", err
	}
	if err := proc.Start(ctx); err != nil {
		return "", err
	}
	st := <-wait
	if code, _, err := st.Result(); err != nil || code != 0 {
		return out.String(), fmt.Errorf("%v exited %d (%v)", args, code, err)
	}
	return out.String(), nil
}

// stop kills and removes a container and its task.
func stop(ctx context.Context, cont client.Container) {
	if task, err := cont.Task(ctx, nil); err == nil {
		if wait, err := task.Wait(ctx); err == nil {
			_ = task.Kill(ctx, syscall.SIGKILL, client.WithKillAll)
			select {
			case <-wait:
			case <-time.After(10 * time.Second):
			}
		}
		// Not WithProcessKill: runsc answers a second kill of a dead
		// sandbox with "sandbox is not running", which containerd's runc
		// shim does not take for "already gone", failing the delete.
		if _, err := task.Delete(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "bench/checkpoint: delete task %s: %v\n", cont.ID(), err)
		}
	}
	if err := cont.Delete(ctx, client.WithSnapshotCleanup); err != nil {
		fmt.Fprintf(os.Stderr, "bench/checkpoint: delete %s: %v\n", cont.ID(), err)
	}
}
