// Package monitor is the protocol of gvx-sentry's monitors.
//
// A monitor is the host process standing for a task's init when the task
// runs in a sandbox that is already running; whoever starts the task talks
// to it on its start socket. `create` binds the socket (so that `start`
// can connect at once) and hands it to the monitor as file descriptor 3
// (Spawn; or gvx-runtime binds it for gvx-sentry's create, which goes on
// as the monitor: SpawnCreate); `start` connects, sends "start" and reads "ok" or "error: …"
// (RequestStart; the monitor's side is ServeStart). Once the task runs,
// its monitor keeps serving the socket for the task's execs (Request,
// Reply). The package does not depend on gVisor, so that
// gvx-runtime, the small front command, can speak it without loading
// gvx-sentry.
package monitor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
)

// listenFD is the monitor's start socket, bound by Spawn.
const listenFD = 3

// Has reports whether container id in root has a monitor waiting for start
// (its socket is api.SentryRoot.MonitorSocket).
func Has(root, id string) bool {
	fi, err := os.Lstat(api.SentryRoot(root).MonitorSocket(id))
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// Spawn starts cmd, a monitor of container id in root, in a session of its
// own with its start socket bound, and returns its pid. The monitor
// outlives the caller (the shim, a subreaper, inherits it).
func Spawn(cmd *exec.Cmd, root, id string) (int, error) {
	path := api.SentryRoot(root).MonitorSocket(id)
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
	conn, err := Dial(root, id)
	if err != nil {
		return err
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

// ErrNotWaiting is what ServeStart returns when the task no longer waits to
// be started.
var ErrNotWaiting = errors.New("no longer waiting to be started")

// startPoll is how often ServeStart asks whether the task still waits.
const startPoll = 200 * time.Millisecond

// ServeStart is the monitor's side of RequestStart: it serves ln, the start
// socket Listener returns, until the task the monitor stands for is started
// or will not be. Each connection carries one request: for "start" it calls
// start and answers "ok" and returns (0, nil), or answers "error: " and
// start's error and returns that error. Every 200 ms without a request it
// calls waiting, which reports whether the task still waits to be started
// and, if not, the status the monitor is to exit with: ServeStart returns
// it with ErrNotWaiting. It leaves ln open, without a deadline.
func ServeStart(ln *net.UnixListener, start func() error, waiting func() (exit int, ok bool)) (int, error) {
	defer ln.SetDeadline(time.Time{})
	for {
		ln.SetDeadline(time.Now().Add(startPoll))
		conn, err := ln.Accept()
		if err != nil {
			if exit, ok := waiting(); !ok {
				return exit, ErrNotWaiting
			}
			continue
		}
		if done, err := answerStart(conn, start); done {
			return 0, err
		}
	}
}

// answerStart answers the request on conn, calling start for "start"; done
// reports whether it did, err is start's error.
func answerStart(conn net.Conn, start func() error) (done bool, err error) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Minute))
	req, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return false, nil
	}
	if req = strings.TrimSpace(req); req != "start" {
		fmt.Fprintf(conn, "error: unknown request %q\n", req)
		return false, nil
	}
	if err := start(); err != nil {
		fmt.Fprintf(conn, "error: %v\n", err)
		return true, err
	}
	fmt.Fprintln(conn, "ok")
	return true, nil
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

// Dial connects to the start socket of container id's monitor in root.
func Dial(root, id string) (*net.UnixConn, error) {
	conn, err := DialPath(api.SentryRoot(root).MonitorSocket(id))
	if err != nil {
		return nil, fmt.Errorf("monitor %w", err)
	}
	return conn, nil
}

// DialPath connects to the unix socket at path, which may exceed sun_path
// (ShortPath).
func DialPath(path string) (*net.UnixConn, error) {
	var conn *net.UnixConn
	err := ShortPath(path, func(name string) (err error) {
		conn, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: name, Net: "unix"})
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		return nil
	})
	return conn, err
}

// ShortPath calls fn with a name of the unix socket at path that fits in a
// socket address (sun_path, 108 bytes) however long path is: /proc/self/fd/N
// of an O_PATH descriptor of the socket, open while fn runs.
func ShortPath(path string, fn func(name string) error) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	return fn(fmt.Sprintf("/proc/self/fd/%d", fd))
}

// A monitor keeps serving its socket after start, for the task's execs:
// JSON requests, one per line, each answered by one Reply line.
const (
	// OpOwner asks for the sandbox's host uid and gid, which an exec's
	// stdio is handed to before OpExec.
	OpOwner = "owner"
	// OpExec executes Process in the task's container with the three
	// stdio descriptors sent along; the reply has its guest pid.
	OpExec = "exec"
	// OpWait waits for guest process Pid over the sandbox control
	// connection sent along (the caller's: the monitor holds no
	// privilege to open more); the reply has its wait status.
	OpWait = "wait"
	// OpSignal sends Signal to guest process Pid; to a sub-container's
	// monitor, Pid 0 is the container's init and All every process in
	// the container.
	OpSignal = "signal"
)

// Request is one request to a monitor.
type Request struct {
	Op      string         `json:"op"`
	Process *specs.Process `json:"process,omitempty"`
	Pid     int32          `json:"pid,omitempty"`
	Signal  int            `json:"signal,omitempty"`
	All     bool           `json:"all,omitempty"`
}

// Reply answers a Request.
type Reply struct {
	Error string `json:"error,omitempty"`
	// Pid is an exec's guest pid; Control the sandbox's control socket,
	// for the exec's waiter.
	Pid     int32  `json:"pid,omitempty"`
	Control string `json:"control,omitempty"`
	// Status is a wait's status (unix.WaitStatus).
	Status uint32 `json:"status,omitempty"`
	// UID and GID answer OpOwner.
	UID int `json:"uid,omitempty"`
	GID int `json:"gid,omitempty"`
}

// ErrGone is what Send, Write and Read fail with when the monitor hangs up
// without an answer: it has exited, and a monitor exits with the task it
// stands for.
var ErrGone = errors.New("monitor went away")

// ErrNotServing is what Send and Read fail with when the monitor answers
// no Reply: it still waits for its task's start (ServeStart), and did
// nothing.
var ErrNotServing = errors.New("monitor does not serve requests yet")

// Send writes req to conn with files passed along, and reads the reply.
func Send(conn *net.UnixConn, req Request, files ...*os.File) (*Reply, error) {
	if err := Write(conn, req, files...); err != nil {
		return nil, err
	}
	return Read(conn)
}

// Write writes req to conn with files passed along.
func Write(conn *net.UnixConn, req Request, files ...*os.File) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	fds := make([]int, 0, len(files))
	for _, f := range files {
		fds = append(fds, int(f.Fd()))
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := conn.WriteMsgUnix(append(data, '\n'), oob, nil); err != nil {
		return fmt.Errorf("%w: %w", ErrGone, err)
	}
	return nil
}

// Read reads the reply to one request from conn.
func Read(conn *net.UnixConn) (*Reply, error) {
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrGone, err)
	}
	var reply Reply
	if err := json.Unmarshal(line, &reply); err != nil {
		return nil, fmt.Errorf("%w: it answered %q", ErrNotServing, bytes.TrimSpace(line))
	}
	if reply.Error != "" {
		return nil, errors.New(reply.Error)
	}
	return &reply, nil
}

// Receive reads one request from conn and the files sent along with it.
// r must be the reader of every request on conn after the first.
func Receive(conn *net.UnixConn, r *bufio.Reader) (Request, []*os.File, error) {
	var files []*os.File
	if r.Buffered() == 0 {
		buf, oob := make([]byte, 64<<10), make([]byte, unix.CmsgSpace(4*8))
		n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
		if err != nil {
			return Request{}, nil, err
		}
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				fds, _ := unix.ParseUnixRights(&m)
				for _, fd := range fds {
					files = append(files, os.NewFile(uintptr(fd), "passed"))
				}
			}
		}
		*r = *bufio.NewReader(io.MultiReader(bytes.NewReader(buf[:n]), conn))
	}
	line, err := r.ReadBytes('\n')
	if err != nil {
		closeAll(files)
		return Request{}, nil, err
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		closeAll(files)
		return Request{}, nil, fmt.Errorf("monitor request %q: %w", line, err)
	}
	return req, files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// ParseSignal accepts a signal's number or its name, with or without SIG.
func ParseSignal(s string) (unix.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("signal %d out of range", n)
		}
		return unix.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}
