// Package embedded runs the private containerd of gvx's SDK and CLI.
//
// The containerd lives in two directories: StateDir (its sockets, runtime
// state, pid file and log; memory-backed /run by default) and DataDir (its
// images and snapshots, kept across runs). Every client of it holds a
// shared lock on StateDir/clients.lock while connected; the first one
// starts it (`gvx containerd`, the gvx CLI's hidden command linking
// containerd's server), and a closing client that finds no other client
// and no container left stops it, so that nothing of it stays running
// once the last sandbox is gone.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/internal/flock"
)

// Config says where the containerd lives and what runs it.
type Config struct {
	// StateDir holds its sockets, state, pid file and log.
	StateDir string
	// DataDir is its root: content store, metadata, snapshots.
	DataDir string
	// Binary runs it: the gvx CLI (as `gvx containerd --config …`), or a
	// containerd binary (a file named containerd).
	Binary string
	// Path is the PATH it runs with; it must find containerd-shim-gvx-v2.
	Path string
}

// Address is the containerd's gRPC socket.
func (c Config) Address() string { return filepath.Join(c.StateDir, "containerd.sock") }

func (c Config) configFile() string { return filepath.Join(c.StateDir, "config.toml") }
func (c Config) pidFile() string    { return filepath.Join(c.StateDir, "containerd.pid") }

// LogFile is where the containerd logs.
func (c Config) LogFile() string { return filepath.Join(c.StateDir, "containerd.log") }

// Daemon is one client's use of the embedded containerd.
type Daemon struct {
	cfg     Config
	clients *os.File // shared flock while in use
	started bool
}

// Start connects to the containerd of cfg, starting it if it does not
// run. The caller must Close the Daemon.
func Start(ctx context.Context, cfg Config) (_ *Daemon, retErr error) {
	if cfg.StateDir == "" || cfg.DataDir == "" || cfg.Binary == "" {
		return nil, errors.New("embedded containerd: StateDir, DataDir and Binary are required")
	}
	if len(cfg.Address()) > 100 {
		return nil, fmt.Errorf("embedded containerd: socket path %s is too long for a Unix socket: choose a shorter state directory", cfg.Address())
	}
	for _, d := range []string{cfg.StateDir, cfg.DataDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("embedded containerd: %w", err)
		}
	}
	clients, err := lock(ctx, filepath.Join(cfg.StateDir, "clients.lock"), unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, clients: clients}
	defer func() {
		if retErr != nil {
			clients.Close()
		}
	}()
	// One starter at a time; the others find it running.
	starting, err := lock(ctx, filepath.Join(cfg.StateDir, "start.lock"), unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	defer starting.Close()
	if listening(cfg.Address()) {
		return d, nil
	}
	if err := d.start(ctx); err != nil {
		return nil, err
	}
	d.started = true
	return d, nil
}

// Address is the containerd's gRPC socket.
func (d *Daemon) Address() string { return d.cfg.Address() }

// Started reports whether this Start started the containerd.
func (d *Daemon) Started() bool { return d.started }

// start runs the containerd and waits until it answers.
func (d *Daemon) start(ctx context.Context) error {
	cfg := d.cfg
	_ = os.Remove(cfg.Address())
	_ = os.Remove(cfg.Address() + ".ttrpc")
	body := fmt.Sprintf(`version = 3
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[timeouts]
  "io.containerd.timeout.shim.cleanup" = "30s"
`, cfg.DataDir, filepath.Join(cfg.StateDir, "state"), cfg.Address(), cfg.Address()+".ttrpc")
	if err := os.WriteFile(cfg.configFile(), []byte(body), 0o600); err != nil {
		return fmt.Errorf("embedded containerd: %w", err)
	}
	logf, err := os.OpenFile(cfg.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("embedded containerd: %w", err)
	}
	defer logf.Close()
	args := []string{"--config", cfg.configFile()}
	if filepath.Base(cfg.Binary) != "containerd" {
		args = append([]string{"containerd"}, args...)
	}
	cmd := exec.Command(cfg.Binary, args...)
	cmd.Env = append(os.Environ(), "PATH="+cfg.Path)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: a terminal's Ctrl-C for the program that started
	// it must not stop the containerd other programs may be using.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("embedded containerd: start %s: %w", cfg.Binary, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	if err := os.WriteFile(cfg.pidFile(), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("embedded containerd: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !listening(cfg.Address()) {
		select {
		case <-exited:
			return fmt.Errorf("embedded containerd (%s) exited at start: %s", cfg.Binary, tail(cfg.LogFile()))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return fmt.Errorf("embedded containerd did not answer on %s within 30 s: %s", cfg.Address(), tail(cfg.LogFile()))
		}
	}
	return nil
}

// Close ends this client's use. If no other client uses the containerd
// and idle (asked with no other client able to connect meanwhile) says it
// has nothing left, it is stopped. A nil idle never stops it.
func (d *Daemon) Close(ctx context.Context, idle func(context.Context) (bool, error)) error {
	if d.clients == nil {
		return nil
	}
	defer func() { _ = flock.Close(d.clients); d.clients = nil }()
	if idle == nil {
		return nil
	}
	// From shared to exclusive: granted only if no other client holds
	// the lock; new clients then wait until the containerd is stopped.
	if err := unix.Flock(int(d.clients.Fd()), unix.LOCK_UN); err != nil {
		return fmt.Errorf("embedded containerd: unlock: %w", err)
	}
	if err := unix.Flock(int(d.clients.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil // another client uses it
	}
	if ok, err := idle(ctx); err != nil || !ok {
		return err
	}
	return d.stop()
}

// stop ends the containerd (SIGTERM, then SIGKILL after 10 s).
func (d *Daemon) stop() error {
	data, err := os.ReadFile(d.cfg.pidFile())
	if err != nil {
		return nil // not ours to stop: it was not started by this package
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if !d.owns(pid) {
		_ = os.Remove(d.cfg.pidFile())
		return nil
	}
	_ = unix.Kill(pid, unix.SIGTERM)
	for deadline := time.Now().Add(10 * time.Second); procfs.Alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = unix.Kill(pid, unix.SIGKILL)
			deadline = time.Now().Add(time.Hour)
		}
	}
	_ = os.Remove(d.cfg.pidFile())
	_ = os.Remove(d.cfg.Address())
	_ = os.Remove(d.cfg.Address() + ".ttrpc")
	return nil
}

// owns reports whether pid is a containerd running on this config.
func (d *Daemon) owns(pid int) bool {
	if !procfs.Alive(pid) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(cmdline), d.cfg.configFile())
}

// listening reports whether something accepts connections on socket.
func listening(socket string) bool {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// lock opens path and takes a flock of kind on it, giving up when ctx
// ends.
func lock(ctx context.Context, path string, kind int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedded containerd: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), kind|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("embedded containerd: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("embedded containerd: waiting for %s: %w", path, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// tail is the end of a log file, for error messages.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "no log (" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return "its log " + path + " ends:\n" + strings.Join(lines, "\n")
}
