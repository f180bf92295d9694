// Package ctlclient makes the few control calls gvx-runtime needs on a
// running sandbox, without gVisor's code.
//
// gVisor's control server (urpc, on the sandbox's control socket) reads
// one JSON object per call, {"method": name, "arg": argument}, with the
// call's file descriptors passed along with its first bytes (SCM_RIGHTS),
// and answers {"success": …, "err": …, "result": …}. The argument types
// here are written from the JSON of gVisor's own (runsc/boot,
// pkg/sentry/control); the package's contract test has gVisor's urpc
// server decode them into gVisor's types, so a gVisor upgrade that
// changes one fails there. gvx-runtime, the small front command, uses it
// for the execs and kills of a sandbox's root container, which would
// otherwise each start gvx-sentry (≈ 25 ms on a VM with slow page faults).
package ctlclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/sentry/monitor"
)

// The control methods, as gVisor's runsc/boot names them.
const (
	methodExecuteAsync = "containerManager.ExecuteAsync"
	methodWaitPID      = "containerManager.WaitPID"
	methodSignal       = "containerManager.Signal"
)

// Mode is how a signal is delivered (gVisor's boot.SignalDeliveryMode).
type Mode int

const (
	// DeliverToProcess signals one process: PID, or the container's init
	// for 0.
	DeliverToProcess Mode = 0
	// DeliverToAllProcesses signals every process of the container.
	DeliverToAllProcesses Mode = 1
)

// ExecArgs is what an exec tells the sandbox (the JSON of gVisor's
// control.ExecArgs, the fields a client sets).
type ExecArgs struct {
	Argv             []string `json:"argv"`
	Envv             []string `json:"envv"`
	WorkingDirectory string   `json:"wd"`
	KUID             uint32
	KGID             uint32
	ExtraKGIDs       []uint32
	NoNewPrivileges  bool
	Capabilities     *Capabilities
	StdioIsPty       bool
	SupportTTYs      bool
	// GuestFDs are the guest's descriptors of the files the call passes,
	// in order.
	GuestFDs    []int
	ContainerID string
}

// Capabilities are a process's capability sets, bit n for capability n
// (gVisor's auth.TaskCapabilities).
type Capabilities struct {
	PermittedCaps   uint64
	InheritableCaps uint64
	EffectiveCaps   uint64
	BoundingCaps    uint64
	AmbientCaps     uint64
}

// waitPIDArgs and signalArgs are gVisor's boot.WaitPIDArgs and
// boot.SignalArgs.
type waitPIDArgs struct {
	PID int32
	CID string
}

type signalArgs struct {
	CID   string
	Signo int32
	PID   int32
	Mode  Mode
}

// Client is one connection to a sandbox's control socket. Calls on it are
// made one at a time.
type Client struct {
	conn *net.UnixConn
	dec  *json.Decoder
}

// Dial connects to the control socket at path (which may exceed
// sun_path).
func Dial(path string) (*Client, error) {
	conn, err := monitor.DialPath(path)
	if err != nil {
		return nil, fmt.Errorf("sandbox control %w", err)
	}
	return newClient(conn), nil
}

// FromFile makes a client of a connection passed as f (the file is the
// client's from then on).
func FromFile(f *os.File) (*Client, error) {
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("sandbox control connection: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, errors.New("sandbox control connection: not a unix socket")
	}
	return newClient(uc), nil
}

func newClient(conn *net.UnixConn) *Client {
	return &Client{conn: conn, dec: json.NewDecoder(conn)}
}

// File returns a duplicate of the connection's descriptor, to pass to
// another process.
func (c *Client) File() (*os.File, error) { return c.conn.File() }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// ExecuteAsync starts args's process with stdio (passed to the sandbox)
// and returns its pid in the sandbox.
func (c *Client) ExecuteAsync(args *ExecArgs, stdio ...*os.File) (int32, error) {
	a := *args
	a.GuestFDs = make([]int, len(stdio))
	for i := range stdio {
		a.GuestFDs[i] = i
	}
	var pid int32
	if err := c.call(methodExecuteAsync, &a, &pid, stdio...); err != nil {
		return 0, err
	}
	return pid, nil
}

// WaitPID waits for process pid of container cid and returns its wait
// status (unix.WaitStatus).
func (c *Client) WaitPID(cid string, pid int32) (uint32, error) {
	var status uint32
	if err := c.call(methodWaitPID, &waitPIDArgs{PID: pid, CID: cid}, &status); err != nil {
		return 0, err
	}
	return status, nil
}

// Signal sends sig to process pid of container cid (0: its init), or to
// all its processes.
func (c *Client) Signal(cid string, pid int32, sig int, mode Mode) error {
	return c.call(methodSignal, &signalArgs{CID: cid, Signo: int32(sig), PID: pid, Mode: mode}, nil)
}

// ErrCall wraps what the sandbox answered a call with: the call reached
// it and failed there.
var ErrCall = errors.New("sandbox control call failed")

// call makes one call and decodes its result into result (if not nil).
func (c *Client) call(method string, arg, result any, files ...*os.File) error {
	data, err := json.Marshal(struct {
		Method string `json:"method"`
		Arg    any    `json:"arg"`
	}{method, arg})
	if err != nil {
		return err
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.conn.WriteMsgUnix(data, oob, nil)
	for err == nil && n < len(data) {
		var m int
		m, err = c.conn.Write(data[n:])
		n += m
	}
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	var reply struct {
		Success bool            `json:"success"`
		Err     string          `json:"err"`
		Result  json.RawMessage `json:"result"`
	}
	if err := c.dec.Decode(&reply); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%s: %w", method, err)
	}
	if !reply.Success {
		return fmt.Errorf("%w: %s: %s", ErrCall, method, reply.Err)
	}
	if result == nil || len(bytes.TrimSpace(reply.Result)) == 0 {
		return nil
	}
	if err := json.Unmarshal(reply.Result, result); err != nil {
		return fmt.Errorf("%s: result: %w", method, err)
	}
	return nil
}
