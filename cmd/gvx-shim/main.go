// Command gvx-shim is gvx's containerd shim server.
//
// containerd resolves the runtime type io.containerd.gvx.v2 to
// containerd-shim-gvx-v2 (package shimstart), which starts this binary,
// installed next to it, as the server of a task or pod — each runs in one
// unprivileged gVisor sandbox (package shim) — and hands it every other
// call (`delete`, `-info`, `-v`).
package main

import (
	"context"
	"runtime"

	containerdshim "github.com/containerd/containerd/v2/pkg/shim"

	"github.com/gvxrun/gvx/shim"
)

func main() {
	// One P: a node runs a shim per sandbox, and a shim's work is waiting
	// on its sandbox's runtime calls and copying its stdio, which a
	// blocked syscall does not hold the P for. The second P of this
	// 2-core machine cost every idle shim 0.19 MiB of runtime state (Go
	// gives a P per core by default) and bought nothing measurable: 1 GiB
	// of exec output, exec latency (docs/benchmarks.md, density). The
	// setting is not in the environment, so the shim's children keep
	// their own.
	runtime.GOMAXPROCS(1)
	shim.ExitIfUnwanted()
	containerdshim.RunShim(context.Background(), shim.NewManager())
}
