package api

import (
	"fmt"
	"net"
	"path/filepath"
	"syscall"
	"time"
)

// UnixAddr is the address to bind or connect the unix socket at path
// with: path itself, or, when path is longer than a socket address holds
// (108 bytes), its base name under /proc/self/fd/N, N a descriptor of its
// directory. Call release once the socket is bound or connected.
func UnixAddr(path string) (addr string, release func(), err error) {
	if len(path) < len(syscall.RawSockaddrUnix{}.Path) {
		return path, func() {}, nil
	}
	dir, err := syscall.Open(filepath.Dir(path), syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", dir, filepath.Base(path)), func() { syscall.Close(dir) }, nil
}

// UnixListening reports whether a process accepts connections on the unix
// socket at path (which may be longer than a socket address holds),
// waiting at most a second.
func UnixListening(path string) bool {
	addr, release, err := UnixAddr(path)
	if err != nil {
		return false
	}
	defer release()
	c, err := net.DialTimeout("unix", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
