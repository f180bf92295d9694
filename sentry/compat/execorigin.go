package compat

import (
	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/marshal/primitive"
	"gvisor.dev/gvisor/pkg/sentry/arch"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
)

// The processes an exec starts outlive a restore; only the exec's own
// process does not.
//
// gVisor marks the process an exec starts (kernel.OriginExec), and its
// restore kills every thread group whose leader carries the mark, since
// the exec's caller is gone. A task inherits its creator's mark at clone,
// so that kill also took everything a command left running in the
// background — `nohup server &`, a database its setup started, a daemon
// that forked away — which on Linux lives on, adopted by init, and which
// is as much the sandbox's state as its files are. keepChildren leaves
// the mark on the exec's process (and its threads: a thread that calls
// execve becomes its thread group's leader, and the restore takes an
// unmarked leader with no parent for a container's init) and clears it
// from the processes that process creates, so that a restore kills the
// command that was running but not what it started. Those are reparented
// to init when the killed process goes, as on Linux; their standard
// streams, if still the exec's, are gone (writes fail).

// keepChildren is the wrapper of clone-like system call name: while a
// marked task creates a new thread group, it is unmarked, so the child
// inherits no mark.
func keepChildren(name string) func(kernel.SyscallFn) kernel.SyscallFn {
	return func(fn kernel.SyscallFn) kernel.SyscallFn {
		return func(t *kernel.Task, sysno uintptr, args arch.SyscallArguments) (uintptr, *kernel.SyscallControl, error) {
			if t.Origin != kernel.OriginExec || makesThread(t, name, args) {
				return fn(t, sysno, args)
			}
			// Only this task's goroutine reads or writes its Origin while
			// it runs (a save reads it with the kernel paused, and a task
			// pauses outside a system call's function), and Clone copies
			// it into the child before returning.
			t.Origin = kernel.OriginUnknown
			defer func() { t.Origin = kernel.OriginExec }()
			return fn(t, sysno, args)
		}
	}
}

// makesThread reports whether clone-like system call name with args
// makes a thread of the caller's thread group (CLONE_THREAD). clone3's
// flags are the first field of the structure its first argument points
// to; if they cannot be read the call is taken for a thread (the mark
// stays, as without gvx), and the system call itself fails on them.
func makesThread(t *kernel.Task, name string, args arch.SyscallArguments) bool {
	var flags uint64
	switch name {
	case "clone":
		flags = args[0].Uint64()
	case "clone3":
		var f primitive.Uint64
		if _, err := f.CopyIn(t, args[0].Pointer()); err != nil {
			return true
		}
		flags = uint64(f)
	default: // fork, vfork
		return false
	}
	return flags&linux.CLONE_THREAD != 0
}
