package compat

import (
	gocontext "context"
	"math"
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sentry/arch"
	"gvisor.dev/gvisor/pkg/sentry/inet"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/pkg/state"

	"github.com/gvxrun/gvx/api"
)

// The Sentry's kernel, once a guest task made one of the system calls
// Install wraps: what the save guard and the thaw after each checkpoint
// act on (gVisor hands gvx no other reference to it).
var (
	guarded   atomic.Pointer[kernel.Kernel]
	guardOnce sync.Once
)

// saveGuardKey is the key of gvx's object in a kernel's additional
// checkpoint state (Kernel.AddStateToCheckpoint).
const saveGuardKey = "gvx.dev/save-guard"

// guarding is fn that first, in the first call of any wrapped system
// call, takes the kernel under guard (guardKernel).
func guarding(fn kernel.SyscallFn) kernel.SyscallFn {
	return func(t *kernel.Task, sysno uintptr, args arch.SyscallArguments) (uintptr, *kernel.SyscallControl, error) {
		if guarded.Load() == nil {
			guardOnce.Do(func() { guardKernel(t.Kernel()) })
		}
		return fn(t, sysno, args)
	}
}

// guardKernel puts a saveGuard in every checkpoint of k and has the
// stacks of k's inner network namespaces resumed after each checkpoint
// attempt (thawAfterCheckpoints).
func guardKernel(k *kernel.Kernel) {
	guarded.Store(k)
	k.AddStateToCheckpoint(saveGuardKey, &saveGuard{})
	go thawAfterCheckpoints(k)
}

// saveGuard is gvx's object in every checkpoint of a guarded kernel.
// Saving it — with the kernel paused, as gVisor encodes the rest — fails
// the checkpoint while the sandbox's inner network namespaces hold TCP
// endpoints gVisor's restore would wait on for ever (innerTCP), so a
// checkpoint that could not be restored is never written, whatever runs
// in the guest: the error names the way out (api.ErrInnerTCP).
type saveGuard struct{}

// StateTypeName implements state.Type.
func (*saveGuard) StateTypeName() string { return "github.com/gvxrun/gvx/sentry/compat.saveGuard" }

// StateFields implements state.Type: a saveGuard holds nothing.
func (*saveGuard) StateFields() []string { return nil }

// StateSave implements state.SaverLoader: it refuses the save, by the
// panic gVisor's encoder turns into the save's error, while innerTCP
// counts any endpoint.
func (*saveGuard) StateSave(state.Sink) {
	k := guarded.Load()
	if k == nil {
		return
	}
	if n := innerTCP(k.SupervisorContext(), k); n > 0 {
		panic(api.InnerTCPError(n))
	}
}

// StateLoad implements state.SaverLoader.
func (*saveGuard) StateLoad(gocontext.Context, state.Source) {}

func init() {
	state.Register((*saveGuard)(nil))
}

// thawAfterCheckpoints resumes the network stacks of k's inner network
// namespaces after each checkpoint attempt, failed or not. gVisor's save
// freezes each endpoint it encodes but resumes only the root namespace's
// stack (Kernel.SaveTo), so without this the sockets of inner containers
// with network namespaces of their own — their loopback's too — stay
// frozen in a sandbox that runs on. The root stack is left to SaveTo,
// and a restore's signal is not a save's: a restored root stack's
// dispatcher still says it is paused (the flag is saved), and resuming it
// leaves its processors a resume they did not ask for, after which the
// next save's own resume blocks for ever (seen). An inner stack's
// dispatcher is never paused, so its resume only thaws its endpoints.
func thawAfterCheckpoints(k *kernel.Kernel) {
	done := make(chan kernel.CheckpointGeneration, 1)
	next := k.CheckpointGen().Count + 1
	for {
		key := k.CheckpointWait.Register(func(gen kernel.CheckpointGeneration, _ error) { done <- gen }, next)
		gen := <-done
		k.CheckpointWait.Unregister(key)
		if gen.Count == math.MaxUint32 {
			return // SignalAllCheckpointWaiters: the sandbox is going away
		}
		next = gen.Count + 1
		if gen.Restore {
			continue
		}
		n := eachInnerNetNS(k.SupervisorContext(), k, func(ns *inet.Namespace) {
			if st := ns.Stack(); st != nil {
				st.Resume()
			}
		})
		log.Debugf("gvx: resumed the stacks of %d inner network namespaces after checkpoint generation %d", n, gen.Count)
	}
}
