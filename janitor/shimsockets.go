package janitor

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// DefaultShimSocketDir is where containerd's shims (gvx's, runc's) make
// their sockets unless containerd's state directory is elsewhere.
const DefaultShimSocketDir = "/run/containerd/s"

// shimSocketAge is the age after which a shim socket nothing listens on
// is garbage: a shim's start makes its socket listening at once (a bind
// then a listen, microseconds apart).
const shimSocketAge = time.Minute

// shimSockets removes the shim sockets nothing listens on: a shim's
// start makes the socket and then forks the server, and a create its
// client abandons at that moment (containerd gives the start up) can
// leave the file with no server behind it. The next start of the same
// shim group removes such a file itself; until then it is a leftover.
func (s *sweep) shimSockets(context.Context) {
	for _, dir := range s.o.ShimSocketDirs {
		es, _ := os.ReadDir(dir)
		for _, e := range es {
			path := filepath.Join(dir, e.Name())
			st, err := os.Lstat(path)
			if err != nil || st.Mode().Type() != os.ModeSocket {
				continue
			}
			if s.now.Sub(st.ModTime()) < shimSocketAge || !s.old(st.ModTime()) || listening(path) {
				continue
			}
			s.add(KindShimSocket, path, "a shim socket nothing listens on (its shim died, or its start was abandoned)", func() (string, error) {
				if listening(path) { // a shim of the same group took it meanwhile
					return "kept: listening again", nil
				}
				if err := os.Remove(path); err != nil {
					return "", err
				}
				return "removed", nil
			})
		}
	}
}

// listening says whether a process listens on unix socket path: a connect
// that is refused says none does; any other outcome is taken for yes.
func listening(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return true
	}
	return !errors.Is(err, syscall.ECONNREFUSED)
}
