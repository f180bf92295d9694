package snapshotter

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/containerd/log"
)

// privateNSEnv marks the test binary re-executed in its own mount
// namespace.
const privateNSEnv = "GVX_SNAPSHOTTER_TEST_PRIVATE_MOUNTNS"

// TestMain runs the crash helper when asked to (see crash_test.go), and
// otherwise re-executes the tests, when run as root, in a private mount
// namespace: their loop mounts are then invisible to (and cannot be
// pinned by) anything started meanwhile on this machine, and the kernel
// tears them down, detaching their auto-clear loop devices, when the test
// process exits, even if it is killed before its cleanups run.
func TestMain(m *testing.M) {
	_ = log.SetLevel("warn")
	if os.Getenv(helperPointEnv) != "" {
		os.Exit(crashHelper())
	}
	if os.Geteuid() != 0 || os.Getenv(privateNSEnv) != "" {
		os.Exit(m.Run())
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), privateNSEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // Go makes "/" rprivate
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		os.Exit(0)
	case errors.As(err, &ee) && ee.Exited():
		os.Exit(ee.ExitCode())
	default:
		fmt.Fprintf(os.Stderr, "re-exec in a private mount namespace: %v\n", err)
		os.Exit(2)
	}
}
