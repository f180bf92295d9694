// Package ctlsock calls a running gVisor sandbox's control server.
//
// gVisor's Sentry serves its control RPCs (containerManager.Pause,
// ExecuteAsync, Signal, …) over a unix stream socket, in gVisor's urpc
// encoding: one JSON object per call ({"method","arg"}) answered by one
// ({"success","err","result"}), files passed along as SCM_RIGHTS with the
// call's first bytes. Both of gvx's modules call it without gVisor's code
// — the shim and the rollout engine (sandbox/control: pause, resume,
// save, port forwarding) and gvx-runtime (sentry/ctlclient: exec, wait,
// signal) — each with argument types written from gVisor's JSON and
// tested against it; this package is the encoding they share. It uses
// the standard library only.
package ctlsock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/gvxrun/gvx/api"
)

// Client is a connection to one sandbox's control server. It is safe for
// concurrent use; calls on it are serialised.
type Client struct {
	mu   sync.Mutex
	conn *net.UnixConn
	dec  *json.Decoder
}

// Dial connects to the control socket at path, which may be longer than a
// socket address holds.
func Dial(path string) (*Client, error) {
	addr, release, err := api.UnixAddr(path)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	defer release()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	return newClient(conn), nil
}

// FromFile makes a client of a connection passed as f (the file is the
// client's from then on).
func FromFile(f *os.File) (*Client, error) {
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("control connection: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, errors.New("control connection: not a unix socket")
	}
	return newClient(uc), nil
}

func newClient(conn *net.UnixConn) *Client {
	return &Client{conn: conn, dec: json.NewDecoder(conn)}
}

// File returns a duplicate of the connection's descriptor, to hand to
// another process.
func (c *Client) File() (*os.File, error) { return c.conn.File() }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// ErrClosed means the sandbox closed the connection: it is gone.
var ErrClosed = errors.New("sandbox control connection closed")

// Call calls method with arg (JSON-encoded as gVisor's argument type is)
// and files, and decodes the result into result (may be nil). A call the
// sandbox fails returns "method: its error".
func (c *Client) Call(method string, arg any, files []*os.File, result any) error {
	data, err := json.Marshal(struct {
		Method string `json:"method"`
		Arg    any    `json:"arg"`
	}{method, arg})
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = syscall.UnixRights(fds...)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, _, err := c.conn.WriteMsgUnix(data, oob, nil)
	for err == nil && n < len(data) {
		var m int
		m, err = c.conn.Write(data[n:])
		n += m
	}
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("%s: %w: %w", method, ErrClosed, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	var r struct {
		Success bool            `json:"success"`
		Err     string          `json:"err"`
		Result  json.RawMessage `json:"result"`
	}
	if err := c.dec.Decode(&r); err != nil {
		if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%s: %w", method, ErrClosed)
		}
		return fmt.Errorf("%s: reply: %w", method, err)
	}
	if !r.Success {
		return fmt.Errorf("%s: %s", method, r.Err)
	}
	if result != nil && len(r.Result) > 0 && string(r.Result) != "null" {
		if err := json.Unmarshal(r.Result, result); err != nil {
			return fmt.Errorf("%s: result: %w", method, err)
		}
	}
	return nil
}
