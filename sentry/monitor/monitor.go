// Package monitor holds the start-socket protocol between gvx-sentry's
// monitors — the host processes standing for a task's init when the task
// runs in a sandbox that is already running — and whoever starts the task.
//
// `create` binds the socket (so that `start` can connect at once) and hands
// it to the monitor as file descriptor 3; `start` connects, sends "start"
// and reads "ok" or "error: …". The package does not depend on gVisor, so
// that gvx-runtime, the small front command, can speak it without loading
// gvx-sentry.
package monitor

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// listenFD is the monitor's start socket, bound by Spawn.
const listenFD = 3

// SocketPath is where the monitor of container id listens for `start`.
func SocketPath(root, id string) string {
	return filepath.Join(root, "gvx-monitor-"+id+".sock")
}

// Has reports whether container id in root has a monitor waiting for start.
func Has(root, id string) bool {
	fi, err := os.Lstat(SocketPath(root, id))
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// Spawn starts cmd, a monitor of container id in root, in a session of its
// own with its start socket bound, and returns its pid. The monitor
// outlives the caller (the shim, a subreaper, inherits it).
func Spawn(cmd *exec.Cmd, root, id string) (int, error) {
	path := SocketPath(root, id)
	ln, err := listen(path)
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	lf, err := ln.File()
	if err != nil {
		os.Remove(path)
		return 0, fmt.Errorf("monitor socket: %w", err)
	}
	defer lf.Close()
	cmd.ExtraFiles = []*os.File{lf}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		os.Remove(path)
		return 0, fmt.Errorf("start monitor: %w", err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	return pid, nil
}

// Listener returns, in a monitor Spawn started, its start socket.
func Listener() (*net.UnixListener, error) {
	l, err := net.FileListener(os.NewFile(listenFD, "start socket"))
	if err != nil {
		return nil, fmt.Errorf("start socket: %w", err)
	}
	ln, ok := l.(*net.UnixListener)
	if !ok {
		l.Close()
		return nil, fmt.Errorf("start socket: not a unix socket")
	}
	ln.SetUnlinkOnClose(false)
	return ln, nil
}

// RequestStart asks the monitor of container id in root to start it.
func RequestStart(root, id string) error {
	// The socket path may exceed sun_path; connect through an O_PATH fd.
	fd, err := unix.Open(SocketPath(root, id), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("monitor socket: %w", err)
	}
	defer unix.Close(fd)
	conn, err := net.Dial("unix", fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return fmt.Errorf("connect to monitor: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("start\n")); err != nil {
		return fmt.Errorf("ask monitor: %w", err)
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("monitor exited without starting the container")
	}
	if reply = strings.TrimSpace(reply); reply != "ok" {
		return errors.New(strings.TrimPrefix(reply, "error: "))
	}
	return nil
}

// listen binds a unix socket at path (which may exceed sun_path: it binds
// relative to its directory) readable by root only.
func listen(path string) (*net.UnixListener, error) {
	dir, name := filepath.Split(path)
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	if err := os.Chdir(dir); err != nil {
		return nil, fmt.Errorf("monitor socket dir: %w", err)
	}
	defer os.Chdir(wd)
	os.Remove(name)
	old := unix.Umask(0o077)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("monitor socket: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	return ln, nil
}
