package nat

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// linkBuffer is each link end's socket buffer: a burst of full-size
// packets.
const linkBuffer = 4 << 20

// LinkPair makes the link between a sandbox's eth0 and its NAT: a
// datagram socketpair (one packet per message), close-on-exec, each end's
// buffers linkBuffer (past net.core.wmem_max/rmem_max when root). The
// first end is the guest's, the second the NAT's (Options.LinkFD).
func LinkPair() ([2]int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return [2]int{-1, -1}, fmt.Errorf("nat link socketpair: %w", err)
	}
	for _, fd := range fds {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, linkBuffer)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, linkBuffer)
	}
	return [2]int{fds[0], fds[1]}, nil
}
