package shim

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/checkpoint"
	"github.com/gvxrun/gvx/internal/randid"
	"github.com/gvxrun/gvx/oci"
	"github.com/gvxrun/gvx/pool/bootspec"
	"github.com/gvxrun/gvx/sandbox"
)

// restoredSandboxDir, in the task's directory (api.Layout.TaskDir, beside
// its link to gvx-sentry), is the sandbox restoreRoot boots for it.
const restoredSandboxDir = ".sandbox"

// restoreTimeout bounds the root container's restore: gVisor only reads
// the image's header and the root's spec then (the sandbox is restored
// when the task is); gvx-sentry's own watchdog bounds the rest.
const restoreTimeout = 2 * time.Minute

// restoreRoot restores, from the checkpoint being restored, the root
// container of the sandbox the task was checkpointed in — a warm pool's
// (checkpoint.Manifest.Root) — into a sandbox of the task's own, laid out
// as a pool's (api.SandboxDir: its record, the root container's bundle,
// and a root filesystem holding gvx-pause) in the task's sentry
// directory, in the task's cgroup. gVisor restores the sandbox once the
// task is restored into it as a container: the runc task service's
// restore at Start, which gvx-sentry runs as a sub-container's
// (sentry/subcontainer.Restore). The task owns the sandbox as if it had
// adopted it: its delete destroys it (never reset into a pool).
func (t *gvxTask) restoreRoot(ctx context.Context) error {
	r, m := t.rec, t.restoring.Root
	if t.role != oci.RoleNone {
		return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("restore %s from %s: the checkpoint holds a pool sandbox's task, and %s is a member of CRI pod %s", r.ID, t.checkpointDir, r.ID, t.pod))
	}
	spec, err := readRootSpec(t.checkpointDir)
	if err != nil {
		return grpcError(errdefs.ErrInvalidArgument, fmt.Errorf("restore %s: %w", r.ID, err))
	}
	if t.spec.Linux == nil || t.spec.Linux.CgroupsPath == "" {
		return grpcError(errdefs.ErrInvalidArgument, fmt.Errorf("restore %s: its spec has no cgroup path for the sandbox", r.ID))
	}
	d := api.SandboxDir(filepath.Join(t.layout.TaskDir(r.Namespace, r.ID), restoredSandboxDir))
	sb := &sandbox.Sandbox{ID: randid.New("gvxroot-", 12), Dir: string(d), Root: d.Root(), PidFile: d.PidFile(),
		Cgroup: t.spec.Linux.CgroupsPath, Flags: m.Flags}
	// Recorded before anything exists: a failure from here on destroys it
	// (the sandbox, and the task's sentry directory it is made in, which
	// linkSentry records later as the task's).
	r.Sandbox, r.Adopted, r.SandboxCgroup = sb, true, sb.Cgroup
	r.BinDir = t.layout.TaskDir(r.Namespace, r.ID)
	if err := r.save(); err != nil {
		return err
	}
	rootfs := filepath.Join(string(d), "rootfs")
	for _, dir := range []string{filepath.Dir(string(d)), string(d), sb.Bundle(), rootfs} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return fmt.Errorf("restore %s: %w", r.ID, err)
		}
	}
	if err := bootspec.InstallPause(bootspec.PausePath(r.Sentry), rootfs); err != nil {
		return grpcError(errdefs.ErrFailedPrecondition, fmt.Errorf("restore %s: the pool sandbox's gvx-pause: %w (install it next to %s with `make install`)", r.ID, err, r.Sentry))
	}
	spec.Root.Path = rootfs
	spec.Linux.CgroupsPath = sb.Cgroup
	if err := oci.WriteSpec(sb.Bundle(), spec); err != nil {
		return err
	}
	t0 := time.Now()
	if err := sb.RunWith(ctx, runReapedOK, r.Sentry, restoreTimeout, "restore", "--detach", "--image-path", t.checkpointDir,
		"--bundle", sb.Bundle(), "--pid-file", sb.PidFile, sb.ID); err != nil {
		return t.explainRestore(fmt.Errorf("restore %s: its sandbox's root container: %w", r.ID, err))
	}
	if err := sb.ReadPid(); err != nil {
		return fmt.Errorf("restore %s: %w", r.ID, err)
	}
	if err := sb.Save(d.Record()); err != nil {
		return err
	}
	if err := r.save(); err != nil {
		return err
	}
	log.G(ctx).Infof("gvx shim: restore %s: root container %s of its sandbox (%s at the checkpoint) restored in %s", r.ID, sb.ID, m.ID, time.Since(t0))
	enterPoolSandbox(t.spec, sb, false, false)
	t.flags = strings.Fields(sb.Flags)
	if t.vols != nil {
		t.flags = append(t.flags, "--file-access-mounts=exclusive")
	}
	return nil
}

// readRootSpec reads the root container's spec in image directory dir.
func readRootSpec(dir string) (*specs.Spec, error) {
	data, err := os.ReadFile(filepath.Join(dir, checkpoint.RootSpecFile))
	if err != nil {
		return nil, fmt.Errorf("the checkpoint's root container: %w (the image is incomplete: take the checkpoint again)", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("the checkpoint's root container: %s: %w", checkpoint.RootSpecFile, err)
	}
	if spec.Root == nil || spec.Linux == nil || spec.Process == nil || len(spec.Process.Args) != 1 || spec.Process.Args[0] != bootspec.PauseInGuest {
		return nil, fmt.Errorf("the checkpoint's root container is not a pool sandbox's gvx-pause (%s): the image is damaged or not gvx's", checkpoint.RootSpecFile)
	}
	return &spec, nil
}
