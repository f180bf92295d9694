package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
)

// NATControl is a request on a NAT's control socket
// (SentryRoot.NATControl): one JSON object per connection, answered with
// one NATControlReply. Only root reaches the socket (mode 0600, root's).
type NATControl struct {
	// Dial, if set, asks for a connection to the guest's TCP port Dial
	// (from 10.0.2.2, as a published port's): once answered, the control
	// connection carries that stream (DialNATPort). A request with Dial
	// set changes nothing else.
	Dial uint16 `json:"dial,omitempty"`
	// Narrow replaces the narrowing of the NAT's egress policy (nil:
	// none). New flows obey it at once; open ones are left alone.
	Narrow *Narrow `json:"narrow"`
}

// NATControlReply is the NAT's answer: empty when the request took
// effect, else why not.
type NATControlReply struct {
	Error string `json:"error,omitempty"`
}

// DialNATPort connects to TCP port of the guest of the NAT listening on
// control socket path: the connection returned carries the stream.
func DialNATPort(ctx context.Context, path string, port uint16) (net.Conn, error) {
	if port == 0 {
		return nil, fmt.Errorf("nat control %s: dial port 0", path)
	}
	c, err := natRequest(ctx, path, NATControl{Dial: port})
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// natRequest sends req on control socket path and reads the one-line
// answer byte by byte (so that nothing after it is taken from the
// connection), returning the connection if the NAT took the request.
func natRequest(ctx context.Context, path string, req NATControl) (net.Conn, error) {
	addr, release, err := UnixAddr(path)
	if err != nil {
		return nil, err
	}
	defer release()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", addr)
	if err != nil {
		return nil, fmt.Errorf("nat control %s: %w", path, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.SetDeadline(deadline)
	fail := func(err error) (net.Conn, error) {
		c.Close()
		return nil, fmt.Errorf("nat control %s: %w", path, err)
	}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return fail(err)
	}
	var line []byte
	b := make([]byte, 1)
	for len(line) < 64<<10 {
		if _, err := c.Read(b); err != nil {
			return fail(fmt.Errorf("no answer: %w", err))
		}
		if b[0] == '\n' {
			break
		}
		line = append(line, b[0])
	}
	var r NATControlReply
	if err := json.Unmarshal(line, &r); err != nil {
		return fail(fmt.Errorf("bad answer %q: %w", line, err))
	}
	if r.Error != "" {
		return fail(errors.New(r.Error))
	}
	return c, nil
}

// SetNATNarrow sends n to the NAT listening on control socket path and
// returns once the NAT applies it (or says why it did not).
func SetNATNarrow(ctx context.Context, path string, n *Narrow) error {
	if err := n.Check(); err != nil {
		return err
	}
	c, err := natRequest(ctx, path, NATControl{Narrow: n})
	if err != nil {
		return err
	}
	return c.Close()
}
