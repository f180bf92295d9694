package nat

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"gvisor.dev/gvisor/pkg/log"

	"github.com/gvxrun/gvx/api"
)

// ListenControl creates the NAT's control socket at path (mode 0600, the
// caller's: root), replacing one a dead NAT left there, and returns its
// file for the NAT process (Options.Control).
func ListenControl(path string) (*os.File, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("nat control %s: %w", path, err)
	}
	f, err := listenUnix(path, nil)
	if err != nil {
		return nil, fmt.Errorf("nat control %s: %w", path, err)
	}
	return f, nil
}

// serveControl answers api.NATControl requests on l, one per connection,
// until the NAT closes: narrowings of the policy, and dials of a guest
// port.
func (n *NAT) serveControl(f *os.File) error {
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("nat control: %w", err)
	}
	n.onClose(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return // closed
			}
			n.control(c)
		}
	}()
	return nil
}

// control answers one request; a dial's connection goes on as the
// guest's stream.
func (n *NAT) control(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var req api.NATControl
	var reply api.NATControlReply
	err := json.NewDecoder(c).Decode(&req)
	if err == nil && req.Dial != 0 {
		go n.toGuest(c, req.Dial, "control dial", func(err error) error {
			r := api.NATControlReply{}
			if err != nil {
				r.Error = fmt.Sprintf("guest port %d: %v", req.Dial, err)
			}
			if werr := json.NewEncoder(c).Encode(r); werr != nil {
				return werr
			}
			return c.SetDeadline(time.Time{})
		})
		return
	}
	defer c.Close()
	if err != nil {
		reply.Error = fmt.Sprintf("bad request: %v", err)
	} else if err := n.policy.SetNarrow(req.Narrow); err != nil {
		reply.Error = err.Error()
	} else {
		b, _ := json.Marshal(req.Narrow)
		log.Infof("nat: egress narrowing now %s", b)
	}
	_ = json.NewEncoder(c).Encode(reply)
}
