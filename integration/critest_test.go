package integration

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/gvxrun/gvx/integration/critest"
	"github.com/gvxrun/gvx/integration/harness"
)

// critestFloorFocus picks the critest specs of what issue 15 fixed: exec
// with a timeout, OOM, hostPath volumes (root-only sources, symlinked
// paths), mount propagation, read-only and recursive read-only mounts,
// port forwarding (a pod on its own network and on the host network).
const critestFloorFocus = `execSync with timeout|should support portforward|Container OOM|starting container with volume|Mount Propagation|Mount Readonly`

// critestFloorSkip leaves out the focus's specs gvx does not pass
// (docs/compatibility.md): they would only wait out their timeouts.
const critestFloorSkip = `mount with 'rshared'|mount with 'rslave'`

// TestCritestFloor runs critest's specs of critestFloorFocus against gvx
// (a private containerd pulling critest's images from a loopback
// registry, as make critest does) and fails if gvx fails one that the
// floor (testdata/critest-floor.txt, written by make critest) says it
// passes. make integration provides critest and crane (CRITEST_BIN,
// CRANE_BIN); without them, outside make, it skips.
func TestCritestFloor(t *testing.T) {
	requireEnv(t)
	critestBin, craneBin := os.Getenv("CRITEST_BIN"), os.Getenv("CRANE_BIN")
	if critestBin == "" || craneBin == "" {
		t.Skip("CRITEST_BIN or CRANE_BIN not set (make integration builds critest and crane)")
	}
	floor, err := critest.ReadFloor("testdata/critest-floor.txt")
	if err != nil {
		t.Fatal(err)
	}
	focus := regexp.MustCompile(critestFloorFocus)
	var want []string
	for _, n := range floor {
		if focus.MatchString(n) {
			want = append(want, n)
		}
	}
	// exec timeout, OOM, two hostPath volumes, rprivate, and the read-only
	// specs at least: a floor without them is not the floor.
	if len(want) < 8 {
		t.Fatalf("the floor has %d specs matching %q, want at least 8: %q", len(want), critestFloorFocus, want)
	}
	checkNoLeaks(t)
	ctx := context.Background()
	dir := t.TempDir()
	env, err := critest.Setup(ctx, critest.Config{
		Bins:    harness.BinsFromEnv(),
		Critest: filepath.Join(critestBin, "critest"),
		Crane:   filepath.Join(craneBin, "crane"),
		Script:  "../hack/mkimage-critest.sh",
		Dir:     dir,
		Log:     testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	r, wall, err := env.Run(ctx, critest.RunOptions{Handler: "gvx", Focus: critestFloorFocus, Skip: critestFloorSkip, Dir: dir, Timeout: 8 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	p, f, s := r.Counts()
	t.Logf("critest -ginkgo.focus %q against gvx: %d passed, %d failed, %d skipped in %.0f s", critestFloorFocus, p, f, s, wall.Seconds())
	for _, n := range want {
		sp, ok := r.Get(n)
		switch {
		case !ok:
			t.Errorf("floor spec %q did not run", n)
		case sp.State != critest.Passed:
			t.Errorf("floor spec %q: %s: %s", n, sp.Raw, sp.Failure)
		}
	}
	if t.Failed() {
		if b, err := os.ReadFile(filepath.Join(dir, "critest-gvx.log")); err == nil {
			t.Logf("critest's output:\n%s", b)
		}
	}
}
