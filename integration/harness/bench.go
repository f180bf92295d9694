package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
)

// Bench is what a benchmark program of `make bench` runs on: its binaries
// and images from make bench's environment, a private containerd, a
// client of it and the busybox test image imported.
type Bench struct {
	Bins       Bins
	Images     string
	Containerd *Containerd
	Client     *client.Client
	Busybox    client.Image
	ns         string
	// pinned: the node's shared gofer network namespace was pinned
	// before the bench (else the bench's sandboxes pinned it, and Close
	// releases it).
	pinned bool
}

// StartBench checks make bench's environment, starts a private containerd
// and imports busybox.tar, in ctx's namespace. Close releases it all.
func StartBench(ctx context.Context) (_ *Bench, retErr error) {
	b := &Bench{Bins: BinsFromEnv(), Images: os.Getenv("IMAGES"), pinned: SharedNetNSPinned()}
	b.ns, _ = namespaces.Namespace(ctx)
	if b.Bins.GVX == "" || b.Bins.Containerd == "" || b.Bins.Runsc == "" || b.Images == "" {
		return nil, fmt.Errorf("run through `make bench` (needs GVX_BIN, CONTAINERD_BIN, RUNSC_BIN, IMAGES)")
	}
	defer func() {
		if retErr != nil {
			b.Close()
		}
	}()
	var err error
	if b.Containerd, err = Start(ctx, b.Bins); err != nil {
		return nil, err
	}
	if b.Client, err = client.New(b.Containerd.Socket()); err != nil {
		return nil, err
	}
	if b.Busybox, err = ImportArchive(ctx, b.Client, filepath.Join(b.Images, "busybox.tar"), ""); err != nil {
		return nil, err
	}
	return b, nil
}

// Close closes the client, stops the containerd, removes runc's root of
// the namespace and, if the bench's sandboxes made it, the pin of the
// node's shared gofer network namespace.
func (b *Bench) Close() {
	if b.Client != nil {
		b.Client.Close()
	}
	if b.Containerd != nil {
		b.Containerd.Close()
	}
	RemoveRuntimeRoot("/run/containerd/runc/" + b.ns)
	if !b.pinned {
		UnpinSharedNetNS()
	}
}
