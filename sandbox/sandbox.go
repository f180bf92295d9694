// Package sandbox is gvx's host-side handle on one gVisor sandbox.
//
// A Sandbox names what a booted sandbox has on the host — its gvx-sentry
// state root, its processes (the Sentry's pid and everything in its
// cgroup), its cgroup, and, for a sandbox a pool booted, a directory that
// is its alone — and Destroy takes all of it down, whether the sandbox
// still runs, ended by itself, or was half made. The shim's tasks (a
// sandbox of their own, or one adopted from a pool) and the pool server
// use it; it is saved as JSON so that cleanup after a crash works from the
// record alone.
package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/internal/cgroups"
)

// Sandbox is one gVisor sandbox on this host.
type Sandbox struct {
	// ID is the sandbox's id, its root container's.
	ID string `json:"id"`
	// Root is the gvx-sentry state root (--root) holding its state.
	Root api.SentryRoot `json:"root"`
	// Dir, if set, is a directory that is the sandbox's alone (a pool
	// sandbox's: Root and its root container's bundle are in it).
	// Without one, Destroy removes Root once no gVisor state is left in
	// it (a pod's root is shared by its containers).
	Dir string `json:"dir,omitempty"`
	// Pid is the host pid of the Sentry; 0 until known (PidFile then
	// has it).
	Pid     int    `json:"pid,omitempty"`
	PidFile string `json:"pid_file,omitempty"`
	// Cgroup is the cgroup path holding the sandbox's processes.
	Cgroup string `json:"cgroup,omitempty"`
	// Flags are the gvx-sentry global flags it runs with.
	Flags string `json:"flags"`
	// Pool describes a sandbox a pool booted (nil: a task's own).
	Pool *Pool `json:"pool,omitempty"`
	// Baseline is a pool sandbox's state as booted (nil: none recorded,
	// it cannot be reset); Uses counts the tasks it served so far.
	Baseline *Baseline `json:"baseline,omitempty"`
	Uses     int       `json:"uses,omitempty"`
}

// Pool is what a pool-booted sandbox records of its pool.
type Pool struct {
	// Class is the class it was booted for.
	Class string `json:"class"`
	// Dir is the pool's directory and Socket its server's, so that
	// whoever destroys the last sandbox after the server stopped removes
	// the pool's directory too.
	Dir    api.PoolDir `json:"dir"`
	Socket string      `json:"socket"`
	// Image is the image its root container runs on (an image pool's),
	// Layers its layer directories, topmost first.
	Image  string   `json:"image,omitempty"`
	Layers []string `json:"layers,omitempty"`
	// Pause is gvx-pause's path in its root container.
	Pause string `json:"pause,omitempty"`
}

// Bundle is the bundle of a pool sandbox's root container.
func (s *Sandbox) Bundle() string { return api.SandboxDir(s.Dir).Bundle() }

// Alive reports whether the Sentry still runs.
func (s *Sandbox) Alive() bool { return procfs.Alive(s.pid()) }

// pid is the Sentry's pid, read from PidFile while not yet known.
func (s *Sandbox) pid() int {
	if s.Pid <= 0 && s.PidFile != "" {
		_ = s.ReadPid()
	}
	return s.Pid
}

// ReadPid sets Pid from PidFile, which a create or restore of the
// sandbox's root container wrote.
func (s *Sandbox) ReadPid() error {
	data, err := os.ReadFile(s.PidFile)
	if err != nil {
		return fmt.Errorf("sandbox %s: read its pid: %w", s.ID, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("sandbox %s: pid file %s: %w", s.ID, s.PidFile, err)
	}
	s.Pid = pid
	return nil
}

// Command is gvx-sentry (at path sentry) run against the sandbox's root
// with its flags.
func (s *Sandbox) Command(ctx context.Context, sentry string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, sentry, append([]string{"--root", string(s.Root)}, args...)...)
	cmd.Env = append(os.Environ(), api.FlagsEnv+"="+s.Flags)
	return cmd
}

// Run runs gvx-sentry (at sentry) against the sandbox's root with args —
// a create, start or restore of its root container — and waits at most
// timeout for it. It is not cancelled with ctx: one killed halfway would
// leave processes no record names. The sandbox it starts inherits its
// stdio: a file in the sandbox's directory, not a pipe, so that nothing
// waits for the sandbox to close it; a failure's error carries what it
// wrote. started, if set, is called with its pid once it runs.
func (s *Sandbox) Run(ctx context.Context, sentry string, timeout time.Duration, started func(pid int), args ...string) error {
	return s.RunWith(ctx, func(cmd *exec.Cmd) error {
		if err := cmd.Start(); err != nil {
			return err
		}
		if started != nil {
			started(cmd.Process.Pid)
		}
		return cmd.Wait()
	}, sentry, timeout, args...)
}

// RunWith is Run with run starting the command and waiting for it (in a
// process that reaps its children on its own, such as a shim, through
// its reaper: exec.Cmd.Wait would race it).
func (s *Sandbox) RunWith(ctx context.Context, run func(*exec.Cmd) error, sentry string, timeout time.Duration, args ...string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	cmd := s.Command(cctx, sentry, args...)
	out, err := os.CreateTemp(s.Dir, "sentry-*.log")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := run(cmd); err != nil {
		msg, _ := os.ReadFile(out.Name())
		return fmt.Errorf("gvx-sentry %s %s: %w: %s", args[0], s.ID, err, strings.TrimSpace(string(msg)))
	}
	return nil
}

// Save writes s as JSON to path (atomically).
func (s *Sandbox) Save(path string) error {
	if err := api.WriteJSON(path, s); err != nil {
		return fmt.Errorf("save sandbox %s: %w", s.ID, err)
	}
	return nil
}

// Load reads a Sandbox saved at path.
func Load(path string) (*Sandbox, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Sandbox
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("sandbox record %s: %w", path, err)
	}
	if s.ID == "" || !filepath.IsAbs(string(s.Root)) {
		return nil, fmt.Errorf("sandbox record %s: no id or state root", path)
	}
	return &s, nil
}

// Destroy stops the sandbox if it still runs and removes everything it
// had on the host: its processes (killed through its cgroup, else by
// `gvx-sentry delete --force` with sentry), gVisor's null-netns pin, its
// directory or state root, its cgroup, and, for the last sandbox of a pool
// whose server is gone, the pool's directory. It is safe to call on a
// sandbox that is already gone or was never fully made.
func (s *Sandbox) Destroy(ctx context.Context, sentry string) error {
	var errs []error
	t0 := time.Now()
	var tKill time.Duration
	defer func() {
		log.G(ctx).Debugf("gvx: destroy sandbox %s: %s (processes gone after %s)", s.ID, time.Since(t0), tKill)
	}()
	s.pid()
	// The sandbox's cgroup holds exactly its processes (Sentry, stubs,
	// gofers, a container's monitor): killing them is all gVisor's forced
	// delete would do that the rest of Destroy does not, without a
	// gvx-sentry start-up. Even a sandbox already gone (its task's delete
	// destroyed it, or it ended with its task's process) may still have
	// processes going away in it, and it must be empty to be removed.
	if n, err := cgroups.Kill(s.Cgroup, 5*time.Second); err != nil || (n == 0 && s.Alive()) {
		log.G(ctx).WithError(err).Debugf("gvx: destroy sandbox %s: %d processes in its cgroup; deleting it through gvx-sentry", s.ID, n)
	}
	if _, err := os.Stat(string(s.Root)); err == nil && s.Alive() && sentry != "" {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := s.Command(cctx, sentry, "delete", "--force", s.ID).CombinedOutput()
		cancel()
		if err != nil && s.Alive() {
			errs = append(errs, fmt.Errorf("delete sandbox %s: %w: %s", s.ID, err, strings.TrimSpace(string(out))))
			_ = unix.Kill(s.Pid, unix.SIGKILL)
		}
	}
	tKill = time.Since(t0)
	// Wait (briefly) for the processes to go so their cgroup can go too.
	for i := 0; i < 100 && s.Alive(); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if s.Dir != "" {
		UnpinNetNS(s.Root)
		if err := os.RemoveAll(s.Dir); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox %s: %w", s.ID, err))
		}
	} else if err := ReleaseRoot(s.Root); err != nil {
		errs = append(errs, err)
	}
	cgroups.Remove(ctx, s.Cgroup)
	if s.Pool != nil {
		if pc := "/" + api.PoolCgroupParent + "/" + s.ID; s.Cgroup != pc {
			// A pod's sandbox whose move from its pool cgroup (into the
			// pod's, s.Cgroup) did not finish: what is left there goes too.
			_, _ = cgroups.Kill(pc, 5*time.Second)
			cgroups.Remove(ctx, pc)
		}
		removeEmptyPoolCgroup()
		if !serving(s.Pool.Socket) {
			RemovePoolDir(s.Pool.Dir)
		}
	}
	return errors.Join(errs...)
}

// UnpinNetNS undoes gVisor's null-netns bind mounts in root (concurrent
// sandbox creation may stack several).
func UnpinNetNS(root api.SentryRoot) {
	for unix.Unmount(root.NullNetNS(), unix.MNT_DETACH) == nil {
	}
}

// UnpinIfIdle unpins the empty network namespace the gofers of state
// directory l share (l.SharedSentryRoot) when no sandbox is left there: no
// task's sentry root and no pool. A sandbox starting meanwhile is not
// harmed (gVisor holds the namespace open before its gofer joins it, and
// a later gofer pins a new one). It reports whether it unpinned.
func UnpinIfIdle(l api.Layout) bool {
	for _, dir := range []string{l.SentryRoots(), l.Pools()} {
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 || err != nil && !errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	UnpinNetNS(api.SentryRoot(l.SharedSentryRoot()))
	return true
}

// ReleaseRoot removes root (a sentry root for one namespace, as
// containerd's runc shim computes it: <root>/<namespace>) once no gVisor
// state remains in it, and its parent if that is then empty. It is a no-op
// while any sandbox or container is still recorded there.
func ReleaseRoot(root api.SentryRoot) error {
	dir := string(root)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read sentry root: %w", err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), api.StateSuffix) {
			return nil
		}
	}
	UnpinNetNS(root)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove sentry root: %w", err)
	}
	if err := os.Remove(filepath.Dir(dir)); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("remove sentry root: %w", err)
	}
	return nil
}
