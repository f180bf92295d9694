package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/pool/client"
)

// State is the layout of the state directory the tests' gvx runs with
// (the default state_dir).
var State = api.Layout{Dir: api.DefaultStateDir}

// SandboxDir is the directory of pool sandbox sb, whichever pool it is of.
func SandboxDir(sb string) api.SandboxDir {
	dirs, _ := filepath.Glob(filepath.Join(State.Pools(), "*", sb))
	if len(dirs) == 1 {
		return api.SandboxDir(dirs[0])
	}
	return api.PoolDir(filepath.Join(State.Pools(), "?")).Sandbox(sb) // no such directory
}

// Pool is a running `gvx pool serve`.
type Pool struct {
	// Config is the gvx config file the pool and its tasks share.
	Config string
	// Dir is the pool's directory (config.PoolDir).
	Dir    api.PoolDir
	bin    string
	socket string
	size   int
	cmd    *exec.Cmd
	mu     sync.Mutex
	log    bytes.Buffer
}

func (p *Pool) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

// Log is what the server has logged so far.
func (p *Pool) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// StartPool writes a gvx config with a pool of size (socket in dir) and
// runs `gvx pool serve` from gvxBin on it, waiting until size sandboxes
// are ready.
func StartPool(ctx context.Context, gvxBin, dir string, size int) (*Pool, error) {
	return StartPoolWithConfig(ctx, gvxBin, dir, size, "")
}

// StartPoolWithConfig is StartPool with more of the gvx config (TOML
// sections after the [pool] one, e.g. "[docker]\nenabled = true").
func StartPoolWithConfig(ctx context.Context, gvxBin, dir string, size int, extraTOML string) (*Pool, error) {
	cfg := filepath.Join(dir, "pool.toml")
	body := fmt.Sprintf("[pool]\nsize = %d\nsocket = %s\n", size, strconv.Quote(filepath.Join(dir, "pool.sock"))) + extraTOML
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		return nil, err
	}
	return ServePool(ctx, gvxBin, cfg, size)
}

// ServePool runs `gvx pool serve` on an existing config and waits until
// size sandboxes are ready.
func ServePool(ctx context.Context, gvxBin, cfg string, size int) (*Pool, error) {
	c, err := config.Load(cfg)
	if err != nil {
		return nil, err
	}
	p := &Pool{Config: cfg, Dir: c.PoolDir(), bin: gvxBin, socket: c.PoolSocket(), size: size}
	if err := p.serve(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// serve starts the server process and waits until it serves and has its
// sandboxes ready.
func (p *Pool) serve(ctx context.Context) error {
	cmd := exec.Command(filepath.Join(p.bin, api.CLIBinary), "pool", "serve", "--config", p.Config)
	cmd.Stdout, cmd.Stderr = p, p
	// Its sandboxes must not hold its output open past a kill -9.
	cmd.WaitDelay = 5 * time.Second
	p.mu.Lock()
	mark := p.log.Len()
	p.mu.Unlock()
	cmd.SysProcAttr = ownGroup()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start gvx pool serve: %w", err)
	}
	started(cmd.Process)
	p.cmd = cmd
	// The server lists its socket once it has removed what a previous
	// server left behind; only then do ready sandboxes count.
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(p.Log()[mark:], "claims on ") {
		if time.Now().After(deadline) || p.exited() {
			_ = p.Stop()
			return fmt.Errorf("gvx pool serve did not come up; its log:\n%s", p.Log())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.WaitReady(ctx, p.size, time.Minute); err != nil {
		_ = p.Stop()
		return err
	}
	return nil
}

// Pid is the server process's pid.
func (p *Pool) Pid() int { return p.cmd.Process.Pid }

// Restart starts the server again on the same config after it was killed
// (Kill) and waits until its sandboxes are ready; a running server is
// killed first.
func (p *Pool) Restart(ctx context.Context) error {
	p.Kill()
	return p.serve(ctx)
}

// exited reports whether the server process is gone.
func (p *Pool) exited() bool {
	return p.cmd.Process.Signal(syscall.Signal(0)) != nil
}

// Size is the number of sandboxes the pool keeps ready.
func (p *Pool) Size() int { return p.size }

// Ready counts the booted, unclaimed pool sandboxes: as the running
// server counts them (a sandbox whose record is written may still be
// having its reset baseline taken, not yet claimable), else by their
// directories (a killed server's).
func (p *Pool) Ready() int {
	if p.cmd.ProcessState == nil && !p.exited() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := client.Query(ctx, p.socket)
		cancel()
		if err == nil {
			return st.Ready
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(string(p.Dir), api.PoolSandboxPrefix+"*"))
	n := 0
	for _, d := range dirs {
		sd := api.SandboxDir(d)
		_, errState := os.Stat(sd.Record())
		_, errClaimed := os.Stat(sd.Claimed())
		if errState == nil && errClaimed != nil {
			n++
		}
	}
	return n
}

// WaitReady waits until at least n sandboxes are ready.
func (p *Pool) WaitReady(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for p.Ready() < n {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("pool never had %d sandboxes ready; its log:\n%s", n, p.Log())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// Kill kills the server with SIGKILL (its sandboxes stay behind) and
// reaps it.
func (p *Pool) Kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	ended(p.cmd.Process)
}

// Stop sends SIGTERM and waits; the server destroys what is still ready.
func (p *Pool) Stop() error {
	if p.cmd.ProcessState != nil {
		return nil
	}
	defer ended(p.cmd.Process)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("gvx pool serve: %w\n%s", err, p.Log())
		}
		return nil
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-done
		return fmt.Errorf("gvx pool serve did not stop on SIGTERM\n%s", p.Log())
	}
}

// Adopted returns the pool sandbox task id of namespace ns runs in ("" if
// it booted its own).
func Adopted(ns, id string) string {
	target, err := os.Readlink(filepath.Join(State.SentryRoot(id), ns))
	if err != nil {
		return ""
	}
	return filepath.Base(filepath.Dir(target))
}

// SandboxPid is the host pid (the Sentry's) of pool sandbox sb.
func SandboxPid(sb string) (int, error) {
	data, err := os.ReadFile(SandboxDir(sb).PidFile())
	if err != nil {
		return 0, fmt.Errorf("pool sandbox %s: %w", sb, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, fmt.Errorf("pool sandbox %s pid file: %w", sb, err)
	}
	return pid, nil
}
