// Package compat makes gVisor's system calls behave like Linux's where gvx's
// workloads need it.
//
// It corrects places where gVisor's system calls behave unlike Linux in
// ways that break the workloads gvx runs, by patching the Sentry's system
// call tables in the process that is about to boot a sandbox, before any
// guest code runs.
package compat

import (
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/arch"
	"gvisor.dev/gvisor/pkg/sentry/kernel"

	// The tables Install patches are registered by this package's init.
	_ "gvisor.dev/gvisor/pkg/sentry/syscalls/linux"
)

// restartableOpens are the system calls that open a path. Linux restarts
// them after a signal handler installed with SA_RESTART (signal(7): "open(2),
// if it can block (e.g., when opening a FIFO; see fifo(7))"): a blocking
// open of a FIFO returns -ERESTARTSYS when interrupted. gVisor returns
// EINTR, so a program that opens a FIFO while signals arrive fails, e.g.
// runc's init opening its exec FIFO in a nested container ("open exec fifo
// /proc/self/fd/5: interrupted system call", docker run exits 125) whenever
// a Go runtime signal lands during the open.
var restartableOpens = map[string]bool{
	"open":    true,
	"openat":  true,
	"creat":   true,
	"openat2": true,
}

// wrappers are the system calls Install patches, by name, and how:
// restartOnSignal for the opens; for ioctl, bridgeIoctl (bridge.go) and
// innerTCPIoctl (innertcp.go); for the calls that make processes,
// keepChildren (execorigin.go). Each of them, and the calls that make
// network namespaces, first takes the kernel under guard (guarding,
// saveguard.go).
var wrappers = func() map[string]func(kernel.SyscallFn) kernel.SyscallFn {
	w := map[string]func(kernel.SyscallFn) kernel.SyscallFn{
		"ioctl": func(fn kernel.SyscallFn) kernel.SyscallFn {
			return guarding(bridgeIoctl(innerTCPIoctl(fn)))
		},
	}
	for name := range restartableOpens {
		w[name] = func(fn kernel.SyscallFn) kernel.SyscallFn { return guarding(restartOnSignal(fn)) }
	}
	for _, name := range []string{"unshare", "setns"} {
		w[name] = guarding
	}
	for _, name := range []string{"clone", "clone3", "fork", "vfork"} {
		keep := keepChildren(name)
		w[name] = func(fn kernel.SyscallFn) kernel.SyscallFn { return guarding(keep(fn)) }
	}
	return w
}()

// Install patches every registered system call table. It is idempotent and
// must run before the kernel starts executing guest tasks.
func Install() {
	for _, table := range kernel.SyscallTables() {
		changed := false
		for num, sc := range table.Table {
			wrap := wrappers[sc.Name]
			if wrap == nil || sc.Fn == nil || patched[table][num] {
				continue
			}
			sc.Fn = wrap(sc.Fn)
			table.Table[num] = sc
			if patched[table] == nil {
				patched[table] = map[uintptr]bool{}
			}
			patched[table][num] = true
			changed = true
		}
		if changed {
			// Init rebuilds the table's lookup array from Table (and
			// registers the table for seccheck updates once more, which
			// only repeats an idempotent update).
			table.Init()
		}
	}
}

// patched records the entries Install wrapped, so that a second Install
// does not wrap them twice.
var patched = map[*kernel.SyscallTable]map[uintptr]bool{}

// restartOnSignal turns fn's EINTR into ERESTARTSYS, which the Sentry
// restarts when the interrupting signal's handler has SA_RESTART and turns
// into EINTR otherwise — what Linux does for these calls.
func restartOnSignal(fn kernel.SyscallFn) kernel.SyscallFn {
	return func(t *kernel.Task, sysno uintptr, args arch.SyscallArguments) (uintptr, *kernel.SyscallControl, error) {
		rv, ctl, err := fn(t, sysno, args)
		if linuxerr.Equals(linuxerr.EINTR, err) {
			err = linuxerr.ERESTARTSYS
		}
		return rv, ctl, err
	}
}
