// Package harness runs a private containerd for gvx's tests and benchmarks.
//
// The containerd has its own root, state and sockets in one directory
// under /run, with gvx's and containerd's binaries first on its PATH.
package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shim"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/mountinfo"
)

// Bins says where the binaries live (the Makefile's cached builds).
type Bins struct {
	GVX, Containerd, Nerdctl, Runsc string
	// Env is more environment for containerd (and so its shims).
	Env []string
}

// BinsFromEnv reads GVX_BIN, CONTAINERD_BIN, NERDCTL_BIN and RUNSC_BIN.
func BinsFromEnv() Bins {
	return Bins{
		GVX:        os.Getenv("GVX_BIN"),
		Containerd: os.Getenv("CONTAINERD_BIN"),
		Nerdctl:    os.Getenv("NERDCTL_BIN"),
		Runsc:      os.Getenv("RUNSC_BIN"),
	}
}

// Path is a PATH with gvx's, containerd's and nerdctl's binaries first, so
// containerd finds containerd-shim-gvx-v2 and the shim finds gvx-sentry.
func (b Bins) Path() string {
	var p []string
	for _, d := range []string{b.GVX, b.Containerd, b.Nerdctl} {
		if d != "" {
			p = append(p, d)
		}
	}
	return strings.Join(append(p, os.Getenv("PATH")), ":")
}

// Containerd is a running private containerd.
type Containerd struct {
	Dir  string
	Bins Bins
	cmd  *exec.Cmd
	done chan struct{}
	// cgroups are the top-level cgroup directories that existed before
	// this containerd started.
	cgroups map[string]bool
}

// Socket is the containerd gRPC address.
func (c *Containerd) Socket() string { return filepath.Join(c.Dir, "c.sock") }

// Start launches containerd with a private configuration that registers
// gvx as the CRI runtime handler "gvx".
func Start(ctx context.Context, bins Bins) (*Containerd, error) {
	return StartWithConfig(ctx, bins, "")
}

// StartWithConfig is Start with extraTOML appended to the configuration,
// e.g. a [proxy_plugins.NAME] section or snapshotter plugin settings.
func StartWithConfig(ctx context.Context, bins Bins, extraTOML string) (_ *Containerd, retErr error) {
	dir, err := os.MkdirTemp("/run", "gvxit-")
	if err != nil {
		return nil, fmt.Errorf("containerd state dir: %w", err)
	}
	c := &Containerd{Dir: dir, Bins: bins, cgroups: topCgroups()}
	defer func() {
		if retErr != nil {
			c.Close()
		}
	}()
	cfg := fmt.Sprintf(`version = 3
root = "%[1]s/root"
state = "%[1]s/state"
[grpc]
  address = "%[1]s/c.sock"
[ttrpc]
  address = "%[1]s/c.sock.ttrpc"
# gvx's cleanup after a dead shim (manager.Stop: a sandbox destroyed, its
# mounts and cgroups released) can take longer than containerd's default
# 5 s on a loaded node; containerd kills it at the timeout.
[timeouts]
  "io.containerd.timeout.shim.cleanup" = "30s"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.gvx]
  runtime_type = "%[2]s"
`, dir, api.RuntimeType) + extraTOML
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	if err := c.launch(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// launch runs containerd on the configuration in c.Dir (its log appended
// to containerd.log) and waits until its socket accepts connections.
func (c *Containerd) launch(ctx context.Context) error {
	logf, err := os.OpenFile(filepath.Join(c.Dir, "containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	// A restarted containerd's socket is made anew: wait for that one.
	_ = os.Remove(c.Socket())
	cmd := exec.Command(filepath.Join(c.Bins.Containerd, "containerd"), "--config", filepath.Join(c.Dir, "config.toml"))
	cmd.Env = append(append(os.Environ(), "PATH="+c.Bins.Path()), c.Bins.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = ownGroup()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start containerd: %w", err)
	}
	started(cmd.Process)
	done := make(chan struct{})
	c.cmd, c.done = cmd, done
	go func() { _ = cmd.Wait(); ended(cmd.Process); close(done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		// The socket file appears at bind, before containerd accepts on
		// it: a client that dials in between is refused.
		if conn, err := net.DialTimeout("unix", c.Socket(), time.Second); err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("containerd exited at start; see %s/containerd.log", c.Dir)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd socket did not appear; see %s/containerd.log", c.Dir)
		}
	}
}

// Pid is the containerd process's pid.
func (c *Containerd) Pid() int { return c.cmd.Process.Pid }

// Restart kills containerd with SIGKILL (its shims, and so their tasks,
// outlive it) and starts it again on the same root, state and sockets;
// clients must connect again.
func (c *Containerd) Restart(ctx context.Context) error {
	_ = c.cmd.Process.Kill()
	<-c.done
	return c.launch(ctx)
}

// keepLog copies containerd's log (its shims' lines included) to
// $GVX_TEST_LOG_DIR, when set, before Close removes it: a leaked shim or a
// failed delete is diagnosed from it after the run.
func (c *Containerd) keepLog() {
	dir := os.Getenv("GVX_TEST_LOG_DIR")
	if dir == "" {
		return
	}
	data, err := os.ReadFile(filepath.Join(c.Dir, "containerd.log"))
	if err != nil || os.MkdirAll(dir, 0o755) != nil {
		return
	}
	_ = os.WriteFile(filepath.Join(dir, "containerd-"+filepath.Base(c.Dir)+".log"), data, 0o644)
}

// Close stops containerd and removes its directory, unmounting anything
// left below it.
func (c *Containerd) Close() {
	if c.cmd != nil && c.cmd.Process != nil {
		c.removeTasks()
		_ = c.cmd.Process.Signal(os.Interrupt)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
	c.stopShims()
	for _, m := range MountsUnder(c.Dir + "/") {
		_ = exec.Command("umount", "-l", m).Run()
	}
	c.keepLog()
	_ = os.RemoveAll(c.Dir)
	// Task cgroups live under /<namespace>/<id>; runtimes remove the task's
	// own cgroup but leave the namespace's (a concurrent create may be
	// about to use it). With containerd gone, remove those this run made,
	// if empty (rmdir refuses otherwise).
	for d := range topCgroups() {
		if !c.cgroups[d] {
			_ = os.Remove(d)
		}
	}
}

// removeTasks kills and deletes what a test left running (one that failed
// half-way): shims outlive containerd by design, and would keep their
// sandboxes and mounts after the harness has gone.
func (c *Containerd) removeTasks() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(c.Socket(), client.WithTimeout(5*time.Second))
	if err != nil {
		return
	}
	defer cl.Close()
	nss, err := cl.NamespaceService().List(ctx)
	if err != nil {
		return
	}
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		conts, err := cl.Containers(nctx)
		if err != nil {
			continue
		}
		for _, cont := range conts {
			if task, err := cont.Task(nctx, nil); err == nil {
				fmt.Fprintf(os.Stderr, "harness: removing task %s/%s a test left behind\n", ns, cont.ID())
				_, _ = task.Delete(nctx, client.WithProcessKill)
			}
			_ = cont.Delete(nctx, client.WithSnapshotCleanup)
		}
	}
}

// stopShims ends the shim servers this containerd left (a create that
// finished after removeTasks had looked, while containerd stopped: a
// benchmark interrupted mid-cycle): for each, the shim's delete action —
// what containerd runs for a shim it lost, which ends the task's sandbox
// and unmounts its rootfs — in its bundle, then SIGKILL to the server.
func (c *Containerd) stopShims() {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		flags := map[string]string{}
		for i := 1; i+1 < len(args); i++ {
			if strings.HasPrefix(args[i], "-") {
				flags[args[i]] = args[i+1]
			}
		}
		if flags["-address"] != c.Socket() || flags["-id"] == "" || flags["-namespace"] == "" || args[len(args)-1] == "delete" {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
		if err != nil {
			continue
		}
		fmt.Fprintf(os.Stderr, "harness: ending shim %d of %s/%s, left serving after containerd stopped\n", pid, flags["-namespace"], flags["-id"])
		del := exec.Command(exe, "-namespace", flags["-namespace"], "-id", flags["-id"], "-address", c.Socket(), "delete")
		del.Dir = filepath.Join(c.Dir, "state", "io.containerd.runtime.v2.task", flags["-namespace"], flags["-id"])
		del.Env = append(append(os.Environ(), "PATH="+c.Bins.Path()), c.Bins.Env...)
		if out, err := del.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "harness: %s delete: %v: %s\n", filepath.Base(exe), err, out)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err != nil {
				break
			}
		}
		// Its listening socket, which containerd removes with a shim.
		nsctx := namespaces.WithNamespace(context.Background(), flags["-namespace"])
		if addr, err := shim.SocketAddress(nsctx, c.Socket(), flags["-id"], false); err == nil {
			_ = shim.RemoveSocket(addr)
		}
	}
}

// topCgroups lists the top-level cgroup directories of every hierarchy.
func topCgroups() map[string]bool {
	out := map[string]bool{}
	for _, pattern := range []string{"/sys/fs/cgroup/*/*", "/sys/fs/cgroup/*"} {
		dirs, _ := filepath.Glob(pattern)
		for _, d := range dirs {
			if st, err := os.Lstat(d); err == nil && st.IsDir() {
				out[d] = true
			}
		}
	}
	return out
}

// MountsUnder lists mount points starting with prefix, deepest first.
func MountsUnder(prefix string) []string { return mountinfo.Under(prefix) }

// RemoveRuntimeRoot unmounts whatever is mounted below dir and removes it:
// the runc shim's state root of a namespace, where runsc (the peer) pins
// a network namespace that it never unmounts.
func RemoveRuntimeRoot(dir string) {
	for _, m := range MountsUnder(dir + "/") {
		_ = exec.Command("umount", "-l", m).Run()
	}
	_ = os.RemoveAll(dir)
}
