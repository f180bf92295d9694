package shim

import (
	"context"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	runcC "github.com/containerd/go-runc"
	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/oci"
)

// A task in a running sandbox (a pool's, or its pod's) has a monitor for
// its init on the host: gvx-sentry's process that starts the container or
// process in the sandbox and exits with its status. When the container's
// init exits, gVisor ends the rest of the container with it (a pid
// namespace ends with its init), and so do its execs. When the monitor
// dies first (kill -9 from outside), the task has exited for containerd —
// but nothing in the sandbox knows: the container, and every exec in it,
// ran on, and an exec then exited 0. containerd's runc shim kills a
// container's processes when its init exits only for a container sharing
// a pid namespace (runc.ShouldKillAllOnExit); in a private one the kernel
// does it. Here the shim does what the kernel would: on the exit of a
// monitor, it has the runtime SIGKILL every process of the task's
// container in the sandbox (`kill --all`), so that its execs end with the
// task, as failures, before containerd reports the task's exit (the runc
// task service publishes an init's exit once its execs have exited). A
// monitor that exits with the container's own status below 128 has seen
// the container end; only a death by signal (the monitor's, or the
// container's: then the kill finds nothing) costs the runtime's kill.

// inSandbox reports whether the task runs in a running sandbox, with a
// monitor for its init.
func (t *gvxTask) inSandbox() bool {
	return t.rec.Adopted || t.role == oci.RoleContainer
}

// watchMonitorExits reads the shim's exits (reaper.Default.Subscribe) and
// ends the container of each task whose monitor exited.
func (s *service) watchMonitorExits(ctx context.Context, exits <-chan runcC.Exit) {
	for e := range exits {
		if e.Status < 128 {
			continue
		}
		if t := s.taskOfInit(e.Pid); t != nil {
			go t.killAllInSandbox(ctx, e.Pid)
		}
	}
}

// taskOfInit is the task in a running sandbox whose init (monitor) has
// host pid pid, if this shim created it.
func (s *service) taskOfInit(pid int) *gvxTask {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tasks {
		if t.inSandbox() && t.initPid.Load() == int64(pid) {
			return t
		}
	}
	return nil
}

// monitorCreated records the pid of the monitor Create left for task t;
// one that exited meanwhile (before the task was known) has its container
// ended at once.
func (t *gvxTask) monitorCreated(ctx context.Context, pid uint32) {
	t.initPid.Store(int64(pid))
	if t.inSandbox() && !procfs.Alive(int(pid)) {
		go t.killAllInSandbox(ctx, int(pid))
	}
}

// endAll is the one kill of a task's container's processes after its
// monitor's death: started at most once, and never after the task's
// delete began, which waits for one under way. The kill names the
// container by id under the task's sentry root, which a later task of the
// same id reuses: a kill that outlived the delete would end that task
// instead (a pool task's id run again at once: TestPoolNATReset under
// load).
type endAll struct {
	mu      sync.Mutex
	done    chan struct{} // closed when the kill is over; nil: none began
	stopped bool          // the task's delete began
}

// begin reports whether the kill may start now, and if so records it;
// end must follow.
func (k *endAll) begin() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped || k.done != nil {
		return false
	}
	k.done = make(chan struct{})
	return true
}

func (k *endAll) end() { close(k.done) }

// stop lets no kill start any more and waits (until ctx ends) for one
// under way.
func (k *endAll) stop(ctx context.Context) {
	k.mu.Lock()
	k.stopped = true
	done := k.done
	k.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// endAllTimeout bounds the kill, and so the wait of the task's delete.
const endAllTimeout = 30 * time.Second

// killAllInSandbox SIGKILLs every process of the task's container in its
// sandbox, once (endAll).
func (t *gvxTask) killAllInSandbox(ctx context.Context, pid int) {
	if !t.endAll.begin() {
		return
	}
	defer t.endAll.end()
	r := t.rec
	ctx, cancel := context.WithTimeout(ctx, endAllTimeout)
	defer cancel()
	err := runtimeKill(ctx, t.binary, filepath.Join(r.RuncRoot, r.Namespace), r.ID, int(syscall.SIGKILL), "--all")
	if err != nil {
		// Ended already (the container's own exit), or its sandbox is gone.
		log.G(ctx).WithError(err).Debugf("gvx shim: %s: monitor %d exited; ending its container", r.ID, pid)
		return
	}
	log.G(ctx).Debugf("gvx shim: %s: monitor %d exited; its container's processes killed", r.ID, pid)
}
