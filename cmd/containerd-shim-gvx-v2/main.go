// Command containerd-shim-gvx-v2 is the binary containerd runs for the
// runtime type io.containerd.gvx.v2.
//
// It starts gvx-shim, the shim server, for a task or pod and hands it every
// other call (package shimstart).
package main

import (
	"os"

	"github.com/gvxrun/gvx/shimstart"
)

func main() { os.Exit(shimstart.Main(os.Args)) }
