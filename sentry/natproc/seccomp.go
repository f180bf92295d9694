package natproc

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// denied are the system calls the NAT process never needs and that would
// matter to an attacker who took it over: running programs, changing
// namespaces, mounts or credentials, loading code into the kernel, reading
// other processes. They fail with EPERM (a seccomp filter on all threads,
// after no_new_privs).
var denied = []uintptr{
	unix.SYS_EXECVE, unix.SYS_EXECVEAT, unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT, unix.SYS_SETNS, unix.SYS_UNSHARE,
	unix.SYS_FSOPEN, unix.SYS_FSMOUNT, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_MOUNT_SETATTR,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE, unix.SYS_KEYCTL, unix.SYS_ADD_KEY,
	unix.SYS_REQUEST_KEY, unix.SYS_USERFAULTFD, unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_SETUID, unix.SYS_SETGID, unix.SYS_SETREUID,
	unix.SYS_SETREGID, unix.SYS_SETRESUID, unix.SYS_SETRESGID, unix.SYS_SETGROUPS, unix.SYS_CAPSET,
	unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_SYSLOG, unix.SYS_ACCT, unix.SYS_QUOTACTL, unix.SYS_PIDFD_GETFD,
}

// auditArch is the seccomp_data.arch of this build (x86-64 or arm64).
func auditArch() uint32 {
	if runtime.GOARCH == "arm64" {
		return 0xc00000b7 // AUDIT_ARCH_AARCH64
	}
	return 0xc000003e // AUDIT_ARCH_X86_64
}

// filterProgram is the classic BPF program of the filter.
func filterProgram() []unix.SockFilter {
	const (
		ldAbs  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret    = unix.BPF_RET | unix.BPF_K
		eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		allow  = unix.SECCOMP_RET_ALLOW
		kill   = unix.SECCOMP_RET_KILL_PROCESS
		offArc = 4 // seccomp_data.arch
		offNr  = 0 // seccomp_data.nr
	)
	prog := []unix.SockFilter{
		{Code: ldAbs, K: offArc},
		{Code: jeq, Jt: 1, K: auditArch()},
		{Code: ret, K: kill},
		{Code: ldAbs, K: offNr},
	}
	n := len(denied)
	for i, nr := range denied {
		// On a match jump to the EPERM return after the list.
		prog = append(prog, unix.SockFilter{Code: jeq, Jt: uint8(n - i), K: uint32(nr)})
	}
	return append(prog, unix.SockFilter{Code: ret, K: allow}, unix.SockFilter{Code: ret, K: eperm})
}

// installFilters installs the filter on every thread of the process.
func installFilters() error {
	prog := filterProgram()
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER, TSYNC): %w", errno)
	}
	return nil
}
