package shim

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// containerd starts a shim server with the `start` command after opening
// the bundle's "log" FIFO for reading, and closes it again when the start
// fails — its client went away and cancelled the create, say. A server
// the start had already forked then found no reader: containerd's shim
// library opens the log for writing before it serves, an open that waits
// for a reader for good, so the server stayed, its socket unanswered
// (seen after gvx serve was SIGKILLed mid-restore). When containerd had
// also removed the bundle by then, the library's open failed and the
// server exited leaving its socket behind. ExitIfUnwanted ends such a
// server, its socket removed, before the library runs.

// listenFD is the shim server's listening socket, passed by the start.
const listenFD = 3

// ExitIfUnwanted exits the process, removing its socket, if it is a shim
// server (not the start or delete command) whose log FIFO has no reader
// or is gone with its bundle: the containerd that started it has given it
// up. The shim's main calls it before containerd's shim library runs.
func ExitIfUnwanted() {
	if !isServer(os.Args) {
		return
	}
	fd, err := unix.Open("log", unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		return
	}
	if sa, err := unix.Getsockname(listenFD); err == nil {
		if un, ok := sa.(*unix.SockaddrUnix); ok && un.Name != "" && un.Name[0] != '@' {
			_ = os.Remove(un.Name)
		}
	}
	if errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENOENT) {
		os.Exit(0)
	}
	fmt.Fprintf(os.Stderr, "containerd-shim-gvx-v2: the bundle's log FIFO: %v\n", err)
	os.Exit(1)
}

// isServer says whether args (the process's) are a shim server's: no
// start or delete action last, and a listening socket as fd 3.
func isServer(args []string) bool {
	if len(args) < 2 {
		return false
	}
	switch args[len(args)-1] {
	case "start", "delete":
		return false
	}
	v, err := unix.GetsockoptInt(listenFD, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	return err == nil && v == 1
}
