// Command containerd-shim-gvx-v2 is gvx's containerd shim.
//
// containerd resolves the runtime type io.containerd.gvx.v2 to this
// binary: each task, or each pod, runs in one unprivileged gVisor sandbox
// (package shim).
package main

import (
	"context"

	containerdshim "github.com/containerd/containerd/v2/pkg/shim"

	"github.com/gvxrun/gvx/shim"
)

func main() {
	containerdshim.RunShim(context.Background(), shim.NewManager())
}
