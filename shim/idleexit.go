package shim

import (
	"context"
	"os"
	"time"

	"github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/log"
)

// A shim whose last task is deleted exits when containerd shuts it down,
// which it does right after the Delete. A client that goes away during
// its delete (its context cancelled: a crashed program) makes containerd
// stop between the two — it has removed the task and never sends the
// Shutdown — and the shim stayed for good with nothing to serve. The same
// holds for a shim containerd started for a create that never came or
// failed while its client went away (a service SIGKILLed mid-restore). So
// when the shim starts, and once a delete or a failed create leaves it
// with no task and no create under way, it shuts itself down
// idleExitAfter later, unless a create came meanwhile (a pod's shim
// serves the pod's next container).

// idleExitAfter is how long a shim left with no task waits for
// containerd's Shutdown; IdleExitEnv (with FaultsEnv=1) sets another, for
// tests.
const idleExitAfter = 30 * time.Second

// IdleExitEnv, with FaultsEnv=1, is a duration that replaces
// idleExitAfter.
const IdleExitEnv = "GVX_TEST_SHIM_IDLE_EXIT"

func idleExitDelay() time.Duration {
	if os.Getenv(FaultsEnv) == "1" {
		if d, err := time.ParseDuration(os.Getenv(IdleExitEnv)); err == nil && d > 0 {
			return d
		}
	}
	return idleExitAfter
}

// armIdleExit starts the wait for containerd's Shutdown if the shim has
// no task and no create under way (at start, after a delete or a failed
// create).
func (s *service) armIdleExit(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy() {
		return
	}
	s.disarmIdleExit()
	d := idleExitDelay()
	s.idle = time.AfterFunc(d, func() { s.idleShutdown(context.WithoutCancel(ctx), d) })
}

// busy says whether the shim has a task or a create under way; s.mu is
// held.
func (s *service) busy() bool { return len(s.tasks) > 0 || len(s.creating) > 0 }

// disarmIdleExit stops the wait (a create begins); s.mu is held.
func (s *service) disarmIdleExit() {
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
}

// idleShutdown shuts the shim down if it still has no task: the runc task
// service exits once it holds no container.
func (s *service) idleShutdown(ctx context.Context, d time.Duration) {
	s.mu.Lock()
	busy := s.busy()
	s.mu.Unlock()
	if busy {
		return
	}
	log.G(ctx).Infof("gvx shim: no task for %s (since its start, last delete or failed create), and no shutdown from containerd: exiting", d)
	if _, err := s.Shutdown(ctx, &task.ShutdownRequest{}); err != nil {
		log.G(ctx).WithError(err).Warn("gvx shim: shut down with no task")
	}
}
