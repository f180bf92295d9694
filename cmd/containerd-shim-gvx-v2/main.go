// Command containerd-shim-gvx-v2 is the containerd runtime
// io.containerd.gvx.v2: each task, or each pod, runs in one unprivileged
// gVisor sandbox.
package main

import (
	"context"

	containerdshim "github.com/containerd/containerd/v2/pkg/shim"

	"github.com/gvxrun/gvx/shim"
)

func main() {
	containerdshim.RunShim(context.Background(), shim.NewManager())
}
