// Package listen opens the listeners of gvx's long-running processes: a
// unix socket (mode 0600) or a TCP address, loopback unless allowed.
package listen

import (
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
)

// Listen opens a listener. addr is unix:///path (or a path,
// made mode 0600) or tcp://host:port (or host:port), which must be a
// loopback address unless remote is set. A socket file left by a dead
// process is replaced; one a live process answers on is refused.
func Listen(addr string, remote bool) (net.Listener, error) {
	switch {
	case strings.HasPrefix(addr, "unix://"):
		return listenUnix(strings.TrimPrefix(addr, "unix://"))
	case strings.HasPrefix(addr, "/"):
		return listenUnix(addr)
	}
	hostport := strings.TrimPrefix(addr, "tcp://")
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: give unix:///path or tcp://127.0.0.1:PORT", addr)
	}
	if !remote {
		ips, err := net.LookupIP(host)
		if host == "" || err != nil || len(ips) == 0 {
			return nil, fmt.Errorf("listen address %q is not a loopback address: bind 127.0.0.1 (or allow remote hosts: gvx serve's --allow-remote, the config's metrics.allow_remote)", addr)
		}
		for _, ip := range ips {
			if !ip.IsLoopback() {
				return nil, fmt.Errorf("listen address %q is not a loopback address: bind 127.0.0.1 (or allow remote hosts: gvx serve's --allow-remote, the config's metrics.allow_remote)", addr)
			}
		}
	}
	l, err := net.Listen("tcp", hostport)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return l, nil
}

func listenUnix(path string) (net.Listener, error) {
	if _, err := os.Stat(path); err == nil {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen on %s: something answers there already", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen on %s: remove the stale socket: %w", path, err)
		}
	}
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return l, nil
}
