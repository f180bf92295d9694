package serve

import (
	"errors"
	"net"

	"github.com/gvxrun/gvx/internal/listen"
)

// Listen opens the service's listener (package listen: unix:///path, or a
// loopback tcp://host:port unless remote).
func Listen(addr string, remote bool) (net.Listener, error) { return listen.Listen(addr, remote) }

// IsClosed says whether err is the error of a closed listener.
func IsClosed(err error) bool { return errors.Is(err, net.ErrClosed) }
