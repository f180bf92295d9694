package compat

import (
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/arch"
	"gvisor.dev/gvisor/pkg/sentry/inet"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/pkg/sentry/socket"

	"github.com/gvxrun/gvx/api"
)

// resumeNetIoctl serves api.IoctlResumeNetworks on a socket: it resumes
// the network stack of every network namespace a task of the sandbox is
// in and returns how many there are. gVisor's save freezes each endpoint
// it encodes (TCP's beforeSave freezes its segment queue and registers it
// with its stack for a Resume; UDP, ICMP, raw and packet endpoints
// register too) but pauses and resumes only the root namespace's stack
// (Kernel.SaveTo), so after a save that lets the sandbox run on — or one
// that failed part way — the sockets of an inner container with a network
// namespace of its own stay frozen, its loopback's included. Resuming a
// stack whose dispatcher was not paused and that holds no endpoint to
// resume does nothing, so any guest process may ask (the shim's and the
// engine's execs hold the container's default capabilities, without
// CAP_NET_ADMIN).
var resumeNetIoctl = guestIoctl(api.IoctlResumeNetworks, func(t *kernel.Task) int {
	return eachNetNS(t, func(ns *inet.Namespace) {
		if st := ns.Stack(); st != nil {
			st.Resume()
		}
	})
})

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

// eachNetNS calls fn once with each network namespace a task of t's
// sandbox is in and returns how many there were.
func eachNetNS(t *kernel.Task, fn func(*inet.Namespace)) int {
	seen := map[*inet.Namespace]bool{}
	for _, task := range t.Kernel().TaskSet().Root.Tasks() {
		ns := task.GetNetworkNamespace()
		if ns == nil {
			continue // exiting
		}
		if !seen[ns] {
			seen[ns] = true
			fn(ns)
		}
		ns.DecRef(t)
	}
	return len(seen)
}
