package critest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/integration/harness"
)

const (
	// Bridge is the CNI bridge of critest's pods, Subnet their network.
	Bridge = "gvxcrit0"
	Subnet = "10.79.0.0/24"
	// SandboxImage is the pod sandbox image containerd is pinned to;
	// hack/mkimage-critest.sh pushes it.
	SandboxImage = "registry.k8s.io/pause:3.10.2"
)

// Mirrored are the registries the hosts.toml mirror sends to the
// loopback registry; _default covers every other one, so that no pull
// leaves the machine.
var Mirrored = []string{"_default", "registry.k8s.io", "gcr.io", "docker.io", "quay.io", "k8s.gcr.io"}

// Config says where the tools are and where to work.
type Config struct {
	Bins    harness.Bins
	Critest string // the critest binary (go test -c of cri-tools' cmd/critest)
	Crane   string // the crane binary (go-containerregistry)
	Script  string // hack/mkimage-critest.sh
	// Dir holds the registry mirror and CNI configuration and the logs.
	Dir string
	// Log gets progress lines; nil discards them.
	Log io.Writer
}

// Env is a loopback registry holding critest's images and a private
// containerd pulling from it.
type Env struct {
	Config
	Ctrd *harness.Containerd
	// Registry is the loopback registry's host:port.
	Registry string

	reg       *exec.Cmd
	regDone   chan struct{}
	cniBefore []string
}

func (c Config) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "critest: "+format+"\n", args...)
	}
}

// Setup starts the registry, pushes the images and starts containerd.
// Close undoes it, whether Setup succeeded or not.
func Setup(ctx context.Context, cfg Config) (_ *Env, retErr error) {
	for _, p := range []string{cfg.Critest, cfg.Crane, cfg.Script} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("critest setup: %w", err)
		}
	}
	e := &Env{Config: cfg, cniBefore: harness.CNIChains()}
	defer func() {
		if retErr != nil {
			e.Close()
		}
	}()
	if err := e.startRegistry(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	log, err := os.Create(filepath.Join(cfg.Dir, "mkimage-critest.log"))
	if err != nil {
		return nil, err
	}
	push := exec.CommandContext(ctx, "bash", cfg.Script, e.Registry)
	push.Env = append(os.Environ(), "CRANE="+cfg.Crane)
	push.Stdout, push.Stderr = log, log
	err = push.Run()
	log.Close()
	if err != nil {
		return nil, fmt.Errorf("critest images (%s): %w: %s", cfg.Script, err, tail(filepath.Join(cfg.Dir, "mkimage-critest.log")))
	}
	cfg.logf("images built and pushed to %s in %.1f s", e.Registry, time.Since(start).Seconds())

	hosts := filepath.Join(cfg.Dir, "hosts")
	for _, r := range Mirrored {
		d := filepath.Join(hosts, r)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		// server is the only host: a pull never falls back to the
		// upstream registry.
		toml := fmt.Sprintf("server = \"http://%s\"\n", e.Registry)
		if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(toml), 0o644); err != nil {
			return nil, err
		}
	}
	cni := filepath.Join(cfg.Dir, "cni")
	if err := os.MkdirAll(cni, 0o755); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"gvxcritest","plugins":[
  {"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":false,
   "ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"dataDir":%q}},
  {"type":"portmap","capabilities":{"portMappings":true},"snat":true},
  {"type":"loopback"}]}`, Bridge, Subnet, filepath.Join(cfg.Dir, "ipam"))
	if err := os.WriteFile(filepath.Join(cni, "10-gvxcritest.conflist"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	e.Ctrd, err = harness.StartWithConfig(ctx, cfg.Bins, fmt.Sprintf(`
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = %q
[plugins."io.containerd.cri.v1.images".registry]
  config_path = %q
[plugins."io.containerd.cri.v1.runtime"]
  # This host refuses negative OOM score adjustments (no
  # CAP_SYS_RESOURCE), which runc makes for every pod sandbox (-998).
  restrict_oom_score_adj = true
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = %q
`, SandboxImage, hosts, cni))
	if err != nil {
		return nil, fmt.Errorf("critest containerd: %w", err)
	}
	cfg.logf("containerd at %s", e.Ctrd.Dir)
	return e, nil
}

var servingOn = regexp.MustCompile(`serving on port (\d+)`)

// startRegistry runs `crane registry serve` on 127.0.0.1 (an in-memory
// registry) and reads its port from its log.
func (e *Env) startRegistry(ctx context.Context) error {
	log, err := os.Create(filepath.Join(e.Dir, "registry.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(e.Crane, "registry", "serve", "--address", "127.0.0.1:0")
	cmd.Stdout = log
	stderr, err := cmd.StderrPipe()
	if err != nil {
		log.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start registry: %w", err)
	}
	e.reg, e.regDone = cmd, make(chan struct{})
	port := make(chan string, 1)
	go func() {
		defer close(e.regDone)
		defer log.Close()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintln(log, sc.Text())
			if m := servingOn.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case port <- m[1]:
				default:
				}
			}
		}
		_ = cmd.Wait()
	}()
	select {
	case p := <-port:
		e.Registry = "127.0.0.1:" + p
		return nil
	case <-e.regDone:
		return fmt.Errorf("registry exited at start: %s", tail(log.Name()))
	case <-time.After(15 * time.Second):
		return fmt.Errorf("registry did not say its port in 15 s: %s", tail(log.Name()))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops containerd (removing what critest left) and the registry,
// and removes the pods' bridge and the port-mapping chains the CNI
// portmap plugin added.
func (e *Env) Close() {
	if e.Ctrd != nil {
		// containerd's log outlives its directory, beside critest's.
		if data, err := os.ReadFile(filepath.Join(e.Ctrd.Dir, "containerd.log")); err == nil {
			_ = os.WriteFile(filepath.Join(e.Dir, "containerd.log"), data, 0o644)
		}
		e.Ctrd.Close()
		e.Ctrd = nil
	}
	if e.reg != nil && e.reg.Process != nil {
		_ = e.reg.Process.Kill()
		<-e.regDone
		e.reg = nil
	}
	_ = exec.Command("ip", "link", "del", Bridge).Run()
	harness.RemoveCNIChains(e.cniBefore)
}

// RunOptions is one critest run.
type RunOptions struct {
	Handler string // the CRI runtime handler: gvx, runc
	// Focus and Skip are ginkgo regexps on the specs' full names (critest
	// always skips its benchmarks).
	Focus, Skip string
	// Dir gets the JSON report (critest-HANDLER.json) and the output
	// (critest-HANDLER.log).
	Dir string
	// Timeout is ginkgo's suite timeout (default 40 minutes).
	Timeout time.Duration
}

// Run runs critest against the handler and reads its report. critest's
// exit status is not an error: failed specs are in the report.
func (e *Env) Run(ctx context.Context, o RunOptions) (*Report, time.Duration, error) {
	if o.Timeout == 0 {
		o.Timeout = 40 * time.Minute
	}
	report := filepath.Join(o.Dir, "critest-"+o.Handler+".json")
	logPath := filepath.Join(o.Dir, "critest-"+o.Handler+".log")
	_ = os.Remove(report)
	sock := "unix://" + e.Ctrd.Socket()
	args := []string{
		"-runtime-endpoint", sock, "-image-endpoint", sock,
		"-runtime-handler", o.Handler,
		"-config", filepath.Join(o.Dir, "no-crictl.yaml"),
		"-ginkgo.json-report", report,
		"-ginkgo.no-color",
		"-ginkgo.timeout", o.Timeout.String(),
	}
	if o.Focus != "" {
		args = append(args, "-ginkgo.focus", o.Focus)
	}
	if o.Skip != "" {
		args = append(args, "-ginkgo.skip", o.Skip)
	}
	log, err := os.Create(logPath)
	if err != nil {
		return nil, 0, err
	}
	defer log.Close()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout+2*time.Minute)
	defer cancel()
	// critest makes its pods' log directories in TMPDIR and leaves them.
	tmp, err := os.MkdirTemp("", "gvx-critest-"+o.Handler+"-")
	if err != nil {
		return nil, 0, err
	}
	defer removeTmp(tmp)
	cmd := exec.CommandContext(ctx, e.Critest, args...)
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.WaitDelay = 10 * time.Second
	e.logf("running critest against handler %s (output: %s)", o.Handler, logPath)
	start := time.Now()
	runErr := cmd.Run()
	wall := time.Since(start)
	r, err := ReadReport(report)
	if err != nil {
		return nil, wall, fmt.Errorf("critest %s (%v): %w; see %s", o.Handler, runErr, err, logPath)
	}
	p, f, s := r.Counts()
	e.logf("handler %s: %d passed, %d failed, %d skipped in %.0f s", o.Handler, p, f, s, wall.Seconds())
	return r, wall, nil
}

// removeTmp removes a critest run's TMPDIR, unmounting first what its
// failed mount propagation specs leave mounted there (their bind mounts of
// a directory onto itself).
func removeTmp(dir string) {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var mounts []string
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = unix.Unmount(mounts[i], unix.MNT_DETACH)
	}
	_ = os.RemoveAll(dir)
}

// tail is the last lines of a log file.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
