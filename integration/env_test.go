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
)

const (
	runtime   = "io.containerd.gvx.v2"
	testNS    = "gvxtest"
	busybox   = "gvx.test/busybox:latest"
	cmdTimout = 2 * time.Minute
)

// env is the private containerd every test talks to.
type env struct {
	dir        string // state of the private containerd (short: socket paths)
	gvxBin     string
	ctrdBin    string
	nerdctlBin string
	runscBin   string
	images     string
	proc       *exec.Cmd
}

var e *env

// skipReason is set when the integration environment is not available.
var skipReason string

func newEnv() (*env, error) {
	x := &env{
		gvxBin:     os.Getenv("GVX_BIN"),
		ctrdBin:    os.Getenv("CONTAINERD_BIN"),
		nerdctlBin: os.Getenv("NERDCTL_BIN"),
		runscBin:   os.Getenv("RUNSC_BIN"),
		images:     os.Getenv("IMAGES"),
	}
	if x.gvxBin == "" || x.ctrdBin == "" || x.images == "" {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("integration tests need root (containerd, mounts, cgroups)")
	}
	dir, err := os.MkdirTemp("/run", "gvxit-")
	if err != nil {
		return nil, err
	}
	x.dir = dir
	cfg := fmt.Sprintf(`version = 3
root = "%[1]s/root"
state = "%[1]s/state"
[grpc]
  address = "%[1]s/c.sock"
[ttrpc]
  address = "%[1]s/c.sock.ttrpc"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.gvx]
  runtime_type = "io.containerd.gvx.v2"
`, dir)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		return nil, err
	}
	x.proc = exec.Command(filepath.Join(x.ctrdBin, "containerd"), "--config", filepath.Join(dir, "config.toml"))
	x.proc.Env = append(os.Environ(), "PATH="+x.path())
	x.proc.Stdout, x.proc.Stderr = logf, logf
	if err := x.proc.Start(); err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(filepath.Join(dir, "c.sock")); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, _, err := x.ctr(context.Background(), "images", "import", filepath.Join(x.images, "busybox.tar")); err != nil {
		x.close()
		return nil, fmt.Errorf("import test image: %w", err)
	}
	return x, nil
}

// path puts gvx's and containerd's binaries first, so containerd finds
// containerd-shim-gvx-v2 and the shim finds gvx-sentry.
func (x *env) path() string {
	p := x.gvxBin + ":" + x.ctrdBin
	if x.nerdctlBin != "" {
		p += ":" + x.nerdctlBin
	}
	return p + ":" + os.Getenv("PATH")
}

func (x *env) close() {
	if x.proc != nil && x.proc.Process != nil {
		_ = x.proc.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = x.proc.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = x.proc.Process.Kill()
			<-done
		}
	}
	unmountBelow(x.dir)
	_ = os.RemoveAll(x.dir)
}

// unmountBelow lazily unmounts whatever containerd left mounted under dir.
func unmountBelow(dir string) {
	for _, m := range mountsMatching(dir + "/") {
		_ = exec.Command("umount", "-l", m).Run()
	}
}

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
	full := append([]string{"--address", filepath.Join(x.dir, "c.sock"), "--namespace", testNS}, args...)
	return x.run(ctx, "", filepath.Join(x.ctrdBin, "ctr"), full...)
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
