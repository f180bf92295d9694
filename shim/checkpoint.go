package shim

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/runc/options"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/checkpoint"
	"github.com/gvxrun/gvx/internal/cgroups"
	"github.com/gvxrun/gvx/oci"
)

// Checkpoint saves a task's sandbox into r.Path: gVisor's state (through
// the runc task service, which runs gvx-sentry checkpoint) and, taken at
// the same paused instant, a copy of each of its ext4lite volumes, with a
// manifest (package checkpoint). The sandbox is paused first and resumed
// afterwards, unless it was paused already or the checkpoint ends the task
// (options Exit, `ctr c checkpoint` without --leave-running semantics),
// which is then killed once everything is saved.
func (s *service) Checkpoint(ctx context.Context, r *task.CheckpointTaskRequest) (*emptypb.Empty, error) {
	t := s.task(r.ID)
	if t == nil {
		return nil, grpcError(errdefs.ErrNotFound, fmt.Errorf("task %s is not this shim's", r.ID))
	}
	if err := t.checkpointable(); err != nil {
		return nil, grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("checkpoint %s: %w", r.ID, err))
	}
	// Kills wait for it (pausedkill.go), and so does another checkpoint;
	// signals kept while the task was paused go once it runs again.
	t.checkpointing.Lock()
	resumed := false
	defer func() {
		t.checkpointing.Unlock()
		if resumed {
			s.deliverPending(ctx, r.ID)
		}
	}()
	opts, err := checkpointOptions(r)
	if err != nil {
		return nil, grpcError(errdefs.ErrInvalidArgument, err)
	}
	st, err := s.TTRPCTaskService.State(ctx, &task.StateRequest{ID: r.ID})
	if err != nil {
		return nil, err
	}
	switch st.Status {
	case tasktypes.Status_RUNNING:
		if err := t.guestChecks(ctx, r.ID, st.Pid); err != nil {
			return nil, grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("checkpoint %s: %w", r.ID, err))
		}
		if _, err := s.TTRPCTaskService.Pause(ctx, &task.PauseRequest{ID: r.ID}); err != nil {
			return nil, err
		}
		if !opts.Exit {
			defer func() {
				if _, err := s.TTRPCTaskService.Resume(ctx, &task.ResumeRequest{ID: r.ID}); err != nil {
					log.G(ctx).WithError(err).Errorf("gvx shim: resume %s after its checkpoint", r.ID)
					return
				}
				resumed = true
			}()
		}
	case tasktypes.Status_PAUSED:
		// containerd's client pauses a task before it checkpoints it: the
		// guest runs again for the check (tens of ms), then is paused.
		if err := s.checkPaused(ctx, t, r.ID, st.Pid); err != nil {
			return nil, err
		}
	default:
		return nil, grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("checkpoint %s: the task is %s; only a running or paused task can be checkpointed", r.ID, st.Status))
	}
	// gVisor saves and, paused by gvx, the sandbox stays paused: the
	// volumes are copied at the same instant, and the task ended after
	// that if asked.
	exit := opts.Exit
	opts.Exit = false
	if r.Options, err = typeurl.MarshalAnyToProto(opts); err != nil {
		return nil, err
	}
	if _, err = s.TTRPCTaskService.Checkpoint(ctx, r); err != nil {
		return nil, err
	}
	if err := t.saveVolumes(ctx, r.Path); err != nil {
		return nil, grpcError(errdefs.ErrUnknown, fmt.Errorf("checkpoint %s: %w", r.ID, err))
	}
	if exit {
		if _, err := s.TTRPCTaskService.Kill(ctx, &task.KillRequest{ID: r.ID, Signal: uint32(unix.SIGKILL), All: true}); err != nil {
			return nil, err
		}
	}
	return &emptypb.Empty{}, nil
}

// checkpointOptions are a checkpoint request's runc options.
func checkpointOptions(r *task.CheckpointTaskRequest) (*options.CheckpointOptions, error) {
	opts := &options.CheckpointOptions{}
	if r.Options == nil {
		return opts, nil
	}
	v, err := typeurl.UnmarshalAny(r.Options)
	if err != nil {
		return nil, fmt.Errorf("checkpoint options %s: %w", r.Options.GetTypeUrl(), err)
	}
	o, ok := v.(*options.CheckpointOptions)
	if !ok {
		return nil, fmt.Errorf("checkpoint options: %T, want runc's CheckpointOptions", v)
	}
	return o, nil
}

// checkpointable refuses, naming why, a task gvx cannot checkpoint.
func (t *gvxTask) checkpointable() error {
	switch {
	case t.network == api.NetworkHost:
		return fmt.Errorf("it uses the host's network stack (host network: network = \"host\", or no network namespace of its own): its sockets live in the host kernel, which gVisor cannot save")
	case !oci.OwnNetNS(t.spec):
		return fmt.Errorf("it has no network namespace of its own (host network) and network %q: its sandbox runs in the host's network namespace, which gVisor cannot save", t.network)
	case t.rec.Adopted && t.rec.PoolProcess:
		return fmt.Errorf("it runs as a process in the root container of an image pool's sandbox, which the sandbox's other state shares; run it as a container (a pool without an image, or a task that boots its own sandbox)")
	case t.rec.Adopted && (t.rec.Sandbox == nil || t.rec.Sandbox.Dir == "" || t.rec.Sandbox.Pool != nil && t.rec.Sandbox.Pool.Image != ""):
		return fmt.Errorf("it runs in an image pool's sandbox, whose root container runs on the pool's image, which a restore could not boot again; use a pool without an image, or a task that boots its own sandbox")
	case t.rec.Docker && t.rec.DockerSocket == nil:
		return fmt.Errorf("it runs in docker mode with dockerd's socket published as a host socket (gVisor's --host-uds=create: network %q in a network namespace it joins, a pool or a pod), which gVisor cannot save; "+
			"docker mode in a sandbox of its own with a new network namespace (any network but \"host\"), or on \"nat\", publishes it through the shim and can be checkpointed", t.network)
	case t.role != oci.RoleNone:
		return fmt.Errorf("it is a member of CRI pod %s; pods are checkpointed as a whole (not yet supported)", t.pod)
	}
	return nil
}

// saveVolumes copies the task's volumes (and its guest's gvx-relay) into
// image directory dir and writes the checkpoint's manifest there.
func (t *gvxTask) saveVolumes(ctx context.Context, dir string) error {
	m := &checkpoint.Manifest{Task: t.rec.ID, Flags: t.flagString(), Docker: t.rec.Docker}
	if t.relay != "" {
		if err := checkpoint.SaveRelay(dir, t.layout.Relay(t.relay)); err != nil {
			return err
		}
		m.Relay = t.relay
	}
	if t.rec.Adopted {
		// The task is a container in a sandbox booted before it: the
		// image holds that sandbox's root container too.
		sb := t.rec.Sandbox
		root, err := checkpoint.SaveRoot(dir, sb.Bundle(), sb.ID, sb.Flags)
		if err != nil {
			return err
		}
		m.Root = root
	}
	if len(t.mounted) > 0 {
		vols, err := checkpoint.SaveVolumes(ctx, dir, t.mounted, cgroups.Procs(t.rec.Sandbox.Cgroup))
		if err != nil {
			return err
		}
		m.Volumes = vols
	}
	return m.Write(dir)
}

// guestChecks refuses the checkpoint of running task id for what only
// its guest can tell: TCP connections to peers outside the sandbox
// (outsideTCP) and, in proxied docker mode, TCP sockets in inner
// containers' own network namespaces (innerTCP).
func (t *gvxTask) guestChecks(ctx context.Context, id string, pid uint32) error {
	if t.mayConnectOut(pid) {
		if err := t.outsideTCP(ctx, id); err != nil {
			return err
		}
	}
	if t.relay != "" {
		return t.innerTCP(ctx, id)
	}
	return nil
}

// checkPaused runs guestChecks on paused task id, resuming it for the
// checks and pausing it again, when it has any to run.
func (s *service) checkPaused(ctx context.Context, t *gvxTask, id string, pid uint32) error {
	if !t.mayConnectOut(pid) && t.relay == "" {
		return nil
	}
	if _, err := s.TTRPCTaskService.Resume(ctx, &task.ResumeRequest{ID: id}); err != nil {
		return err
	}
	cerr := t.guestChecks(ctx, id, pid)
	if _, err := s.TTRPCTaskService.Pause(ctx, &task.PauseRequest{ID: id}); err != nil {
		return err
	}
	if cerr != nil {
		return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("checkpoint %s: %w", id, cerr))
	}
	return nil
}

// innerTCP refuses the checkpoint of proxied docker-mode task id while
// its inner containers' own network namespaces hold TCP sockets whose
// restore would never finish (checkpoint.InnerTCP).
func (t *gvxTask) innerTCP(ctx context.Context, id string) error {
	return checkpoint.InnerTCP(t.runIn(ctx, id, checkpoint.InnerTCPCmd, 10*time.Second))
}

// gvisorVersionMismatch is in gVisor's refusal of a state file that a
// gvx-sentry of another build saved (gVisor's version, which the Makefile
// stamps with gVisor's module version and the Go release: the layout of
// the saved state).
const gvisorVersionMismatch = "version does not match across checkpoint restore"

// explainRestore turns the error of a restoring task's start, when gVisor
// refused the checkpoint as another build's, into one that says what it
// means and what to do.
func (t *gvxTask) explainRestore(err error) error {
	if t == nil || t.restoring == nil || !strings.Contains(err.Error(), gvisorVersionMismatch) {
		return err
	}
	return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf(
		"restore %s from %s: the checkpoint was saved by another build of gvx-sentry (another gVisor or Go), whose saved state this one cannot load; "+
			"restore it on a node running that build, or take the checkpoint again on this one (a golden checkpoint: `gvx golden build --checkpoint`): %v",
		t.rec.ID, t.checkpointDir, err))
}
