package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/cgroups"
	"github.com/gvxrun/gvx/sandbox"
)

// record is everything gvx set up on the host for one task. It is saved
// in the bundle before each step that leaves something behind, so that
// one release undoes it all, whoever calls it: Delete (after the runtime
// deleted the sandbox), a Create that failed half-way, and, after a shim
// crash, the cleanup containerd runs (manager.Stop) from the saved record
// alone.
type record struct {
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	Bundle    string `json:"bundle"`
	// Sentry is the gvx-sentry the task runs with.
	Sentry string `json:"sentry"`
	// BinDir holds the task's link to gvx-sentry (or its front) and its
	// flags; RuncRoot is the state root containerd's runc shim is given
	// (it adds the namespace).
	BinDir   string `json:"bin_dir,omitempty"`
	RuncRoot string `json:"runc_root,omitempty"`
	// Sandbox is the sandbox the task owns — its own, or, if Adopted, a
	// pool's — torn down with the task. A container in its pod's sandbox
	// owns none.
	Sandbox *sandbox.Sandbox `json:"sandbox,omitempty"`
	Adopted bool             `json:"adopted,omitempty"`
	// Owner is what the adopted sandbox's claimed marker names while the
	// task owns it (ns/id/nonce); Returning: the task's delete is handing
	// it back to its pool (it is the task's only while the marker still
	// names Owner).
	Owner     string `json:"owner,omitempty"`
	Returning bool   `json:"returning,omitempty"`
	// PoolProcess: the task is a process started in the adopted
	// sandbox's root container, not a container inside it.
	PoolProcess bool `json:"pool_process,omitempty"`
	// PoolLink is the task's sentry root (its namespace's, in
	// api.Layout.SentryRoot), a link to the adopted sandbox's root.
	PoolLink string `json:"pool_link,omitempty"`
	// PodRoot is a pod container's sentry root (its pod's), released once
	// no container's state is left in it; Cgroup its own cgroup.
	PodRoot api.SentryRoot `json:"pod_root,omitempty"`
	Cgroup  string         `json:"cgroup,omitempty"`
	// SandboxCgroup is the cgroup of the running sandbox a pool or pod
	// container reports metrics and OOM events from.
	SandboxCgroup string `json:"sandbox_cgroup,omitempty"`
	// Rootfs is the root filesystem mount point gvx made (mounted on the
	// host, or an ext4 image's mount point in the sandbox's namespace).
	Rootfs string `json:"rootfs,omitempty"`
	// Dirs are the task's directories outside the bundle (volume staging,
	// docker socket).
	Dirs []string `json:"dirs,omitempty"`
	// Docker is docker mode; DockerSocket the host socket of its dockerd
	// when the shim publishes it (proxied docker mode).
	Docker       bool        `json:"docker,omitempty"`
	DockerSocket *socketFile `json:"docker_socket,omitempty"`
	// Sockets are the host unix sockets of the NAT's published ports,
	// removed once the sandbox is gone.
	Sockets []string `json:"sockets,omitempty"`
	// RestoreCopy is the copy of a checkpoint image containerd's task
	// service extracted for the task's restore and never removes
	// (restoreCopy), removed once the restored task has started.
	RestoreCopy string `json:"restore_copy,omitempty"`
}

// save writes r to its bundle.
func (r *record) save() error {
	if err := api.WriteJSON(filepath.Join(r.Bundle, api.ShimRecordFile), r); err != nil {
		return fmt.Errorf("record task %s: %w", r.ID, err)
	}
	return nil
}

// loadRecord reads the record in bundle; (nil, nil) if there is none
// (gvx set nothing up, or released it all).
func loadRecord(bundle string) (*record, error) {
	data, err := os.ReadFile(filepath.Join(bundle, api.ShimRecordFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("task record %s: %w", filepath.Join(bundle, api.ShimRecordFile), err)
	}
	return &r, nil
}

// mkdirInNamespaceDir creates dir with mode, and its parents
// traverse-only. Its parent is a namespace's directory that another
// task's release removes when it finds it empty (release, unmountRootfs):
// a removal between the two steps is retried (seen in bench/churn as
// "create rootfs dir: mkdir …: no such file or directory").
func mkdirInNamespaceDir(dir string, mode os.FileMode) error {
	for try := 1; ; try++ {
		err := os.MkdirAll(filepath.Dir(dir), 0o711)
		if err == nil {
			err = os.Mkdir(dir, mode)
			if err == nil || errors.Is(err, os.ErrExist) {
				return nil
			}
		}
		// Removed between two steps: between MkdirAll and Mkdir
		// (ENOENT), or between MkdirAll's own mkdir, which found it,
		// and its stat, which did not (EEXIST). A release empties it at
		// most once per task: 100 tries is far beyond a real race.
		if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, os.ErrExist) || try == 100 {
			return err
		}
	}
}

// makeDir records dir as the task's, then creates it (parents
// traverse-only) with mode and, if uid ≥ 0, that owner.
func (r *record) makeDir(dir string, mode os.FileMode, uid, gid int) error {
	r.Dirs = append(r.Dirs, dir)
	if err := r.save(); err != nil {
		return err
	}
	if err := mkdirInNamespaceDir(dir, mode); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		return err
	}
	if uid >= 0 {
		if err := os.Chown(dir, uid, gid); err != nil {
			return fmt.Errorf("chown %s: %w", dir, err)
		}
	}
	return nil
}

// release undoes everything r records, in reverse order of set-up: the
// owned sandbox (destroyed if it still runs), links and roots, cgroup,
// directories, the root filesystem mount, the task's gvx-sentry link. It
// is idempotent. When all of it is gone the record goes too, so that the
// cleanup containerd runs after the shim exits finds nothing to do.
func (r *record) release(ctx context.Context) {
	var errs []error
	if r.Sandbox != nil && r.ownsSandbox(ctx) {
		if err := r.Sandbox.Destroy(ctx, r.Sentry); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, r.releaseHost(ctx)...)
	if err := errors.Join(errs...); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx shim: release of task %s incomplete; its record stays for the cleanup after the shim exits", r.ID)
		return
	}
	if err := os.Remove(filepath.Join(r.Bundle, api.ShimRecordFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.G(ctx).WithError(err).Warnf("gvx shim: remove the record of task %s", r.ID)
	}
}

// ownsSandbox reports whether the task still owns its sandbox: always
// its own; an adopted one while the sandbox's claimed marker names the
// task (a task's delete that handed it back to its pool, then crashed,
// must not destroy what the pool now owns or handed to another task).
func (r *record) ownsSandbox(ctx context.Context) bool {
	if !r.Adopted || r.Sandbox.Dir == "" || r.Owner == "" {
		return true
	}
	owner, err := os.ReadFile(api.SandboxDir(r.Sandbox.Dir).Claimed())
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(r.Sandbox.Dir); err == nil {
			log.G(ctx).Infof("gvx shim: pool sandbox %s of task %s was taken back by its pool", r.Sandbox.ID, r.ID)
			return false
		}
		return true // gone: destroying it again removes what is left
	}
	if err == nil && len(owner) > 0 && string(owner) != r.Owner {
		log.G(ctx).Infof("gvx shim: pool sandbox %s of task %s now belongs to %s", r.Sandbox.ID, r.ID, owner)
		return false
	}
	return true
}

// releaseHost undoes what r records besides its sandbox: links and roots,
// cgroup, sockets, directories, the root filesystem mount, the task's
// gvx-sentry link.
func (r *record) releaseHost(ctx context.Context) []error {
	var errs []error
	if r.PoolLink != "" {
		if err := removePoolLink(r.PoolLink); err != nil {
			errs = append(errs, err)
		}
	}
	if r.PodRoot != "" {
		if err := sandbox.ReleaseRoot(r.PodRoot); err != nil {
			errs = append(errs, err)
		}
	}
	cgroups.Remove(ctx, r.Cgroup)
	for _, p := range r.Sockets {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if r.DockerSocket != nil {
		if err := r.DockerSocket.remove(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, dir := range r.Dirs {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
		_ = os.Remove(filepath.Dir(dir)) // the namespace dir, if empty
	}
	if r.RestoreCopy != "" {
		if err := os.RemoveAll(r.RestoreCopy); err != nil {
			errs = append(errs, err)
		}
	}
	if r.Rootfs != "" {
		if err := releaseRootfs(r.Rootfs); err != nil {
			errs = append(errs, err)
		}
	}
	if r.BinDir != "" {
		if err := releaseTaskSentry(r.BinDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
