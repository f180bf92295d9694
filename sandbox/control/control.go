// Package control calls a running gVisor sandbox's control server.
//
// gVisor's Sentry serves its control RPCs (containerManager.Pause, Resume,
// Checkpoint, …) over a unix stream socket in the sentry root, in gVisor's
// urpc encoding (api/ctlsock). runsc's CLI opens a connection per
// command, after ≈ 17 ms of its own start-up; a Client keeps one open, so
// a call costs the RPC alone. The argument types here mirror the JSON of
// gVisor's at the version gvx-sentry links (runsc/boot,
// pkg/sentry/control); the integration tests drive them against real
// sandboxes.
package control

import (
	"os"

	"github.com/gvxrun/gvx/api/ctlsock"
)

// Methods of gVisor's containerManager.
const (
	methodPause       = "containerManager.Pause"
	methodResume      = "containerManager.Resume"
	methodCheckpoint  = "containerManager.Checkpoint"
	methodPortForward = "containerManager.PortForward"
)

// Client is a connection to one sandbox's control server (api/ctlsock's).
// It is safe for concurrent use; calls on it are serialised.
type Client struct {
	*ctlsock.Client
}

// Dial connects to the control socket at path, which may be longer than a
// socket address can hold.
func Dial(path string) (*Client, error) {
	c, err := ctlsock.Dial(path)
	if err != nil {
		return nil, err
	}
	return &Client{c}, nil
}

// ErrClosed means the sandbox closed the connection: it is gone.
var ErrClosed = ctlsock.ErrClosed

// Pause stops every task of the sandbox's kernel (calls nest: as many
// Resumes undo them).
func (c *Client) Pause() error { return c.Call(methodPause, nil, nil, nil) }

// Resume undoes one Pause.
func (c *Client) Resume() error { return c.Call(methodResume, nil, nil, nil) }

// SaveOptions are gVisor's control.SaveOpts (the fields gvx sets).
type SaveOptions struct {
	Metadata                       map[string]string `json:"metadata"`
	AppMFExcludeCommittedZeroPages bool              `json:"app_mf_exclude_committed_zero_pages"`
	HavePagesFile                  bool              `json:"have_pages_file"`
	Resume                         bool              `json:"Resume"`
}

// Checkpoint saves the sandbox's kernel into state, and its memory into
// pagesMeta and pages (uncompressed, committed zero pages left out). With
// resume the kernel runs on afterwards (as far as the caller's own Pause
// lets it); without, the sandbox exits once saved.
func (c *Client) Checkpoint(state, pagesMeta, pages *os.File, resume bool) error {
	// Committed zero pages are not searched for (gVisor's
	// AppMFExcludeCommittedZeroPages): scanning every committed page made
	// a save 3.4× slower at 256 MiB (503 → 148 ms p50, bench/checkpoint,
	// 2026-12-05) for no smaller image there (256.4 → 256.3 MiB); pages
	// gVisor only may have committed are still checked.
	opts := SaveOptions{
		Metadata:                       map[string]string{"compression": "none"},
		AppMFExcludeCommittedZeroPages: false,
		HavePagesFile:                  true,
		Resume:                         resume,
	}
	return c.Call(methodCheckpoint, &opts, []*os.File{state, pagesMeta, pages}, nil)
}

// portForwardOptions are gVisor's boot.PortForwardOpts (the stream is the
// call's one file).
type portForwardOptions struct {
	ContainerID string
	Port        uint16
}

// PortForward hands conn, a connected stream socket, to the sandbox: the
// Sentry connects to 127.0.0.1:port in its own network stack (as
// container id's) and copies bytes both ways until either end closes.
// The caller may close its copy of conn once the call returns. gVisor
// serves it on its netstack (network "sandbox") and on the host network,
// not on "none".
func (c *Client) PortForward(id string, port uint16, conn *os.File) error {
	return c.Call(methodPortForward, &portForwardOptions{ContainerID: id, Port: port}, []*os.File{conn}, nil)
}
