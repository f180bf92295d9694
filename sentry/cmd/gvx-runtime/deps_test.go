package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoGVisor: the small front binaries — gvx-runtime, gvx-hook (the
// createRuntime hook of every cold create) and gvx-pause — link no gVisor
// code. gVisor's package initialisation is what makes gvx-sentry slow to
// start (≈ 25 ms on a VM with slow page faults); a package that pulled it
// in made gvx-hook a 44 MB binary for a while.
func TestNoGVisor(t *testing.T) {
	for _, pkg := range []string{".", "../gvx-hook", "../gvx-pause"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Skipf("go list: %v: %s", err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "gvisor.dev/") {
				t.Errorf("%s links %s", pkg, dep)
				break
			}
		}
	}
}
