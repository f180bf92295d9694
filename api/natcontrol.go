package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// NATControl is a request on a NAT's control socket
// (SentryRoot.NATControl): one JSON object per connection, answered with
// one NATControlReply. Only root reaches the socket (mode 0600, root's).
type NATControl struct {
	// Narrow replaces the narrowing of the NAT's egress policy (nil:
	// none). New flows obey it at once; open ones are left alone.
	Narrow *Narrow `json:"narrow"`
}

// NATControlReply is the NAT's answer: empty when the request took
// effect, else why not.
type NATControlReply struct {
	Error string `json:"error,omitempty"`
}

// SetNATNarrow sends n to the NAT listening on control socket path and
// returns once the NAT applies it (or says why it did not).
func SetNATNarrow(ctx context.Context, path string, n *Narrow) error {
	if err := n.Check(); err != nil {
		return err
	}
	addr, release, err := UnixAddr(path)
	if err != nil {
		return err
	}
	defer release()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", addr)
	if err != nil {
		return fmt.Errorf("nat control %s: %w", path, err)
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.SetDeadline(deadline)
	if err := json.NewEncoder(c).Encode(NATControl{Narrow: n}); err != nil {
		return fmt.Errorf("nat control %s: %w", path, err)
	}
	var r NATControlReply
	if err := json.NewDecoder(c).Decode(&r); err != nil {
		return fmt.Errorf("nat control %s: no answer: %w", path, err)
	}
	if r.Error != "" {
		return fmt.Errorf("nat control %s: %s", path, r.Error)
	}
	return nil
}
