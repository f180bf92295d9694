package compat

import (
	"testing"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/sentry/arch"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
)

// TestKeepChildren: a marked task is unmarked while a clone, fork or vfork
// of it makes a new thread group (what the child inherits), marked
// again afterwards, and left marked while it makes a thread; an unmarked
// task is left alone.
func TestKeepChildren(t *testing.T) {
	for _, tc := range []struct {
		name   string
		origin kernel.TaskOrigin
		flags  uint64
		during kernel.TaskOrigin
	}{
		{"clone", kernel.OriginExec, uint64(linux.SIGCHLD), kernel.OriginUnknown},
		{"clone", kernel.OriginExec, linux.CLONE_VM | linux.CLONE_VFORK | uint64(linux.SIGCHLD), kernel.OriginUnknown},
		{"clone", kernel.OriginExec, linux.CLONE_VM | linux.CLONE_THREAD | linux.CLONE_SIGHAND, kernel.OriginExec},
		{"fork", kernel.OriginExec, 0, kernel.OriginUnknown},
		{"vfork", kernel.OriginExec, 0, kernel.OriginUnknown},
		{"clone", kernel.OriginUnknown, uint64(linux.SIGCHLD), kernel.OriginUnknown},
		{"fork", kernel.OriginUnknown, 0, kernel.OriginUnknown},
	} {
		task := &kernel.Task{Origin: tc.origin}
		var seen kernel.TaskOrigin
		fn := keepChildren(tc.name)(func(t *kernel.Task, _ uintptr, _ arch.SyscallArguments) (uintptr, *kernel.SyscallControl, error) {
			seen = t.Origin
			return 42, nil, nil
		})
		var args arch.SyscallArguments
		args[0].Value = uintptr(tc.flags)
		rv, _, err := fn(task, 0, args)
		if rv != 42 || err != nil {
			t.Errorf("%s %#x: (%d, %v), want the call's (42, nil)", tc.name, tc.flags, rv, err)
		}
		if seen != tc.during {
			t.Errorf("%s %#x from origin %d: origin %d during the call, want %d", tc.name, tc.flags, tc.origin, seen, tc.during)
		}
		if task.Origin != tc.origin {
			t.Errorf("%s %#x: origin %d after the call, want %d back", tc.name, tc.flags, task.Origin, tc.origin)
		}
	}
}
