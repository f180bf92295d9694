package compat

import (
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/arch"
	"gvisor.dev/gvisor/pkg/sentry/inet"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/pkg/sentry/socket"
)

// guestIoctl serves ioctl request req on any socket with serve, whose
// result the call returns; every other ioctl is fn's.
func guestIoctl(req uint32, serve func(t *kernel.Task) int) func(fn kernel.SyscallFn) kernel.SyscallFn {
	return func(fn kernel.SyscallFn) kernel.SyscallFn {
		return func(t *kernel.Task, sysno uintptr, args arch.SyscallArguments) (uintptr, *kernel.SyscallControl, error) {
			if args[1].Uint() != req {
				return fn(t, sysno, args)
			}
			isSocket, err := socketFD(t, args[0].Int())
			if err != nil {
				return 0, nil, err
			}
			if !isSocket {
				return fn(t, sysno, args)
			}
			return uintptr(serve(t)), nil, nil
		}
	}
}

// socketFD says whether t's file descriptor fd is a socket (EBADF if it
// has no such descriptor): the ioctls gvx serves are served on sockets
// only.
func socketFD(t *kernel.Task, fd int32) (bool, error) {
	file := t.GetFile(fd)
	if file == nil {
		return false, linuxerr.EBADF
	}
	defer file.DecRef(t)
	_, ok := file.Impl().(socket.Socket)
	return ok, nil
}

// eachInnerNetNS calls fn once with each network namespace other than the
// root one that a task of kernel k is in (an inner container's own) and
// returns how many there were.
func eachInnerNetNS(ctx context.Context, k *kernel.Kernel, fn func(*inet.Namespace)) int {
	seen := map[*inet.Namespace]bool{}
	for _, task := range k.TaskSet().Root.Tasks() {
		ns := task.GetNetworkNamespace()
		if ns == nil {
			continue // exiting
		}
		if !seen[ns] && !ns.IsRoot() {
			seen[ns] = true
			fn(ns)
		}
		ns.DecRef(ctx)
	}
	return len(seen)
}
