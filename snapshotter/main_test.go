package snapshotter

import (
	"os"
	"testing"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/internal/testfs"
)

// privateNSEnv marks the test binary re-executed in its own mount
// namespace.
const privateNSEnv = "GVX_SNAPSHOTTER_TEST_PRIVATE_MOUNTNS"

// TestMain runs the crash helper when asked to (see crash_test.go), and
// otherwise the tests, as root in a private mount namespace (see
// testfs.RunPrivate).
func TestMain(m *testing.M) {
	_ = log.SetLevel("warn")
	if os.Getenv(helperPointEnv) != "" {
		os.Exit(crashHelper())
	}
	os.Exit(testfs.RunPrivate(m, privateNSEnv))
}
