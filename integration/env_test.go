package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/shim"
)

const (
	runtime   = api.RuntimeType
	testNS    = "gvxtest"
	busybox   = "gvx.test/busybox:latest"
	cmdTimout = 2 * time.Minute
)

// env is the private containerd every test talks to.
type env struct {
	*harness.Containerd
	dir        string // the containerd's directory (short: socket paths)
	gvxBin     string
	ctrdBin    string
	nerdctlBin string
	runscBin   string
	images     string
}

var e *env

// skipReason is set when the integration environment is not available.
var skipReason string

func newEnv() (*env, error) {
	bins := harness.BinsFromEnv()
	images := os.Getenv("IMAGES")
	if bins.GVX == "" || bins.Containerd == "" || images == "" {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("integration tests need root (containerd, mounts, cgroups)")
	}
	// The crash tests make shims crash themselves mid-create.
	// A shim left with no task exits after 5 s (TestShimIdleExit).
	bins.Env = append(bins.Env, shim.FaultsEnv+"=1", shim.IdleExitEnv+"=5s")
	c, err := harness.Start(context.Background(), bins)
	if err != nil {
		return nil, err
	}
	x := &env{Containerd: c, dir: c.Dir, gvxBin: bins.GVX, ctrdBin: bins.Containerd, nerdctlBin: bins.Nerdctl, runscBin: bins.Runsc, images: images}
	if _, _, err := x.ctr(context.Background(), "images", "import", filepath.Join(x.images, "busybox.tar")); err != nil {
		x.close()
		return nil, fmt.Errorf("import test image: %w", err)
	}
	return x, nil
}

func (x *env) path() string { return x.Bins.Path() }

func (x *env) close() { x.Containerd.Close() }

// result is a finished command.
type result struct {
	stdout, stderr string
	code           int
}

func (x *env) run(ctx context.Context, stdin string, name string, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "PATH="+x.path())
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	r := result{stdout: so.String(), stderr: dropDeprecation(se.String()), code: cmd.ProcessState.ExitCode()}
	if _, ok := err.(*exec.ExitError); ok {
		err = nil
	}
	return r, err
}

// ctr runs ctr against the private containerd in the test namespace and
// fails on a non-zero exit.
func (x *env) ctr(ctx context.Context, args ...string) (string, string, error) {
	r, err := x.ctrResult(ctx, args...)
	if err == nil && r.code != 0 {
		err = fmt.Errorf("ctr %s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout, r.stderr, err
}

func (x *env) ctrResult(ctx context.Context, args ...string) (result, error) {
	return x.ctrResultIn(ctx, testNS, args...)
}

// ctrResultIn is ctrResult in namespace ns.
func (x *env) ctrResultIn(ctx context.Context, ns string, args ...string) (result, error) {
	return x.run(ctx, "", filepath.Join(x.ctrdBin, "ctr"), ctrArgs(x.Containerd, ns, args)...)
}

// ctrArgs is a ctr command line against containerd c in namespace ns. The
// task IO fifos of `run`, `task start` and `task exec` go below c's own
// directory: ctr leaves them behind for detached tasks, and by default
// they would pile up in the host's /run/containerd/fifo.
func ctrArgs(c *harness.Containerd, ns string, args []string) []string {
	full := []string{"--address", c.Socket(), "--namespace", ns}
	fifo := []string{"--fifo-dir", filepath.Join(c.Dir, "fifo")}
	switch {
	case len(args) > 0 && args[0] == "run":
		return append(append(append(full, "run"), fifo...), args[1:]...)
	case len(args) > 1 && (args[0] == "task" || args[0] == "t" || args[0] == "tasks") && (args[1] == "exec" || args[1] == "start"):
		return append(append(append(full, args[:2]...), fifo...), args[2:]...)
	}
	return append(full, args...)
}

// dropDeprecation removes containerd's cgroup v1 deprecation warning, which
// every client prints on these hosts, from stderr.
func dropDeprecation(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "DEPRECATION") && strings.Contains(l, "cgroup v1") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func requireEnv(t *testing.T) {
	t.Helper()
	if e == nil {
		t.Skip(skipReason)
	}
}

// mustCtr runs ctr and fails the test on error.
func mustCtr(t *testing.T, args ...string) string {
	t.Helper()
	out, _, err := e.ctr(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// cleanupTask removes a task and its container whatever state they are in.
func cleanupTask(t *testing.T, id string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = e.ctrResult(ctx, "task", "kill", "-s", "KILL", id)
		for i := 0; i < 50; i++ {
			r, _ := e.ctrResult(ctx, "task", "rm", "-f", id)
			if r.code == 0 || strings.Contains(r.stderr, "not found") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		_, _ = e.ctrResult(ctx, "container", "rm", id)
	})
}
