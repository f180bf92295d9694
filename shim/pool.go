package shim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/pool/bootspec"
	"github.com/gvxrun/gvx/pool/client"
	"github.com/gvxrun/gvx/sandbox"
)

// claim asks cfg's pool for a sandbox booted the way task id's own would
// be (docker mode is the sandbox's: a docker task needs a docker pool),
// for owner. It returns nil, and the task boots its own sandbox, when the
// pool has none to give.
func claim(ctx context.Context, cfg config.Config, sentry, id, owner string, docker bool) *sandbox.Sandbox {
	cfg.Docker.Enabled = docker
	sb, err := client.Claim(ctx, cfg.PoolSocket(), bootspec.Class(cfg, sentry), owner)
	if err != nil {
		lvl := log.G(ctx).Warnf
		if errors.Is(err, client.ErrNoSandbox) {
			lvl = log.G(ctx).Infof
		}
		lvl("gvx shim: %s boots its own sandbox: %v", id, err)
		return nil
	}
	return sb
}

// enterPoolSandbox points the spec at an adopted sandbox: the task becomes
// a container inside it, or, when asProcess, a process started in its root
// container (sentry/exectask). When reset, the container's delete leaves
// the sandbox running (the shim resets it for its pool).
func enterPoolSandbox(spec *specs.Spec, sb *sandbox.Sandbox, asProcess, reset bool) {
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	if asProcess {
		spec.Annotations[api.AnnotationPoolExec] = sb.ID
	} else {
		// gVisor's own annotations for a container joining a sandbox.
		spec.Annotations[api.CRIContainerType] = api.CRIRoleContainer
		spec.Annotations[api.CRISandboxID] = sb.ID
		if spec.Annotations[api.CRIContainerName] == "" {
			// One name for the task container of every pool sandbox: a
			// restore of its checkpoint (restoreroot.go) finds it by
			// name, however many tasks the sandbox served before.
			spec.Annotations[api.CRIContainerName] = poolTaskName
		}
		if !reset {
			// gvx-sentry's delete of the container takes the whole
			// sandbox with it.
			spec.Annotations[api.AnnotationPoolSandbox] = sb.ID
		}
	}
	// The sandbox's cgroup (with the same limits) holds the task.
	spec.Linux.CgroupsPath = ""
}

// startUTS gives an adopted pool sandbox the hostname and domain name the
// task's spec asks for (a CRI pod's, `nerdctl run`'s), in the background:
// gVisor runs every container of a sandbox in the root container's UTS
// namespace, which the pool booted with its own (bootspec.Hostname). The
// task's Start waits for it, and so does its Delete, so that a reset of
// the sandbox never runs beside it (awaitUTS). A reset puts the pool's
// back.
func (t *gvxTask) startUTS(ctx context.Context, sb *sandbox.Sandbox) {
	host, domain := t.spec.Hostname, t.spec.Domainname
	pool, poolDomain := bootspec.Hostname, ""
	if b := sb.Baseline; b != nil {
		pool, poolDomain = b.Guest.Hostname, b.Guest.Domainname
	}
	if host == "" || host == pool && domain == poolDomain {
		return
	}
	u := &utsSet{done: make(chan struct{})}
	t.uts = u
	go func() {
		u.err = sb.SetUTS(context.WithoutCancel(ctx), host, domain)
		close(u.done)
	}()
}

// utsSet is startUTS's work: err is set once done is closed.
type utsSet struct {
	done chan struct{}
	err  error
}

// awaitUTS waits for startUTS's work, if any, and returns its error
// (which fails the start). Any number of callers may wait.
func (t *gvxTask) awaitUTS() error {
	if t == nil || t.uts == nil {
		return nil
	}
	<-t.uts.done
	return t.uts.err
}

// poolTaskName is the container name (api.CRIContainerName) of a task
// that runs as a container in a pool sandbox.
const poolTaskName = "gvx-task"

// linkPoolRoot makes dir/<ns> (the sentry root containerd's runc shim
// computes for the task) point at the adopted sandbox's root.
func linkPoolRoot(dir, ns string, sb *sandbox.Sandbox) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("create sentry root: %w", err)
	}
	if err := os.Symlink(string(sb.Root), filepath.Join(dir, ns)); err != nil {
		return fmt.Errorf("link pool sandbox root: %w", err)
	}
	return nil
}

// removePoolLink removes a task's link to its adopted pool sandbox's root
// (linkPoolRoot), and the task's sentry directory above it once empty:
// another namespace's task of the same id may still have its own there.
// (A record written before the link was per namespace names the directory
// itself, removed whole.)
func removePoolLink(link string) error {
	fi, err := os.Lstat(link)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("pool sandbox link: %w", err)
	case fi.IsDir():
		return os.RemoveAll(link)
	}
	if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pool sandbox link: %w", err)
	}
	removeIfEmpty(filepath.Dir(link))
	return nil
}
