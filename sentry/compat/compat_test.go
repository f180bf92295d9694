package compat

import (
	"testing"

	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/arch"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
)

func TestRestartOnSignal(t *testing.T) {
	for _, tc := range []struct{ in, want error }{
		{linuxerr.EINTR, linuxerr.ERESTARTSYS},
		{linuxerr.ENOENT, linuxerr.ENOENT},
		{nil, nil},
	} {
		fn := restartOnSignal(func(*kernel.Task, uintptr, arch.SyscallArguments) (uintptr, *kernel.SyscallControl, error) {
			return 7, nil, tc.in
		})
		rv, _, err := fn(nil, 0, arch.SyscallArguments{})
		if rv != 7 || err != tc.want {
			t.Errorf("%v: got (%d, %v), want (7, %v)", tc.in, rv, err, tc.want)
		}
	}
}

func TestInstallPatchesEveryOpenAndIoctl(t *testing.T) {
	Install()
	want := map[*kernel.SyscallTable]map[uintptr]bool{}
	for _, table := range kernel.SyscallTables() {
		for num, sc := range table.Table {
			if wrappers[sc.Name] != nil {
				if want[table] == nil {
					want[table] = map[uintptr]bool{}
				}
				want[table][num] = true
			}
		}
	}
	if len(want) == 0 {
		t.Fatal("no system call table has open/openat/ioctl")
	}
	for table, nums := range want {
		if len(patched[table]) != len(nums) {
			t.Errorf("%v/%v: patched %v, want %v", table.OS, table.Arch, patched[table], nums)
		}
	}
}

// TestWrappersNameRealCalls: every name in wrappers is a system call of
// this architecture's Linux table, so that none is wrapped in name only.
func TestWrappersNameRealCalls(t *testing.T) {
	names := map[string]bool{}
	for _, table := range kernel.SyscallTables() {
		for _, sc := range table.Table {
			names[sc.Name] = true
		}
	}
	for name := range wrappers {
		if !names[name] {
			t.Errorf("wrappers names %q, which no system call table has", name)
		}
	}
}
