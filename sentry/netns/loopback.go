// Package netns configures the sandbox's network namespace from the host.
package netns

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// LoopbackUp sets lo up in the network namespace at nsPath. gVisor copies
// only interfaces that are up from the sandbox's network namespace; a fresh
// namespace (ctr, `nerdctl --net none`) has its loopback down, which would
// leave the guest without even 127.0.0.1.
func LoopbackUp(nsPath string) error {
	ns, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", nsPath, err)
	}
	defer unix.Close(ns)
	// This thread enters the namespace and is never handed back to the Go
	// scheduler: the process exits after the hook.
	runtime.LockOSThread()
	if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter network namespace %s: %w", nsPath, err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket in %s: %w", nsPath, err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get lo flags in %s: %w", nsPath, err)
	}
	flags := ifr.Uint16()
	if flags&unix.IFF_UP != 0 {
		return nil
	}
	ifr.SetUint16(flags | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set lo up in %s: %w", nsPath, err)
	}
	return nil
}
