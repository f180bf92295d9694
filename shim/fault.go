package shim

import (
	"context"
	"os"
	"syscall"
	"time"

	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Crash points, for tests of cleanup after a shim crash: a task whose spec
// has FaultAnnotation = step makes its shim kill itself with SIGKILL right
// after that step of its Create — a step of gvxTask.prepare ("spec",
// "volumes", "docker", "pool", "hook", "sentry", "rootfs", "write", "root")
// or FaultCreated, once the sandbox exists — or, at the task's delete,
// FaultReset, once its pool took its reset sandbox back — but only when the shim runs
// with FaultsEnv=1 in its environment (the integration harness gives its
// containerd that), never otherwise. Under the same condition a task
// whose spec has SlowCreateAnnotation = a duration makes its Create wait
// that long before it creates the sandbox, for tests of what containerd
// does meanwhile (inflight.go).
const (
	FaultAnnotation      = "dev.gvx.test.crash-after"
	SlowCreateAnnotation = "dev.gvx.test.slow-create"
	FaultsEnv            = "GVX_TEST_FAULTS"
	FaultCreated         = "created"
	FaultReset           = "reset"
	// FaultLog starts the line the shim logs as it crashes itself.
	FaultLog = "gvx shim: crash injected after step"
)

// faultStep is the step after which spec's task is to crash its shim ("":
// none).
func faultStep(spec *specs.Spec) string {
	if os.Getenv(FaultsEnv) != "1" {
		return ""
	}
	return spec.Annotations[FaultAnnotation]
}

// crashAfter kills the shim if the task asked for a crash after step.
func (t *gvxTask) crashAfter(ctx context.Context, step string) {
	if t.fault == "" || t.fault != step {
		return
	}
	log.G(ctx).Warnf("%s %s of task %s", FaultLog, step, t.rec.ID)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL cannot be caught
}

// slowCreate waits as long as the task's spec asks before its sandbox is
// created (tests only, as faultStep).
func (t *gvxTask) slowCreate(ctx context.Context) {
	if os.Getenv(FaultsEnv) != "1" {
		return
	}
	d, err := time.ParseDuration(t.spec.Annotations[SlowCreateAnnotation])
	if err != nil || d <= 0 {
		return
	}
	log.G(ctx).Warnf("gvx shim: create of %s held for %s (%s)", t.rec.ID, d, SlowCreateAnnotation)
	time.Sleep(d)
}
