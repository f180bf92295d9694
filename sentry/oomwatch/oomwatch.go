// Package oomwatch tells a sandbox's guest-facing stderr that the host's
// OOM killer ended it.
//
// A sandbox with a memory limit runs in a host cgroup with that limit;
// past it the kernel kills the Sentry, the task exits 137 and containerd
// reports TaskOOM, but nothing the agent reads says why. Before gVisor's
// create of such a sandbox, Spawn starts a small watcher (gvx-sentry
// WatchCommand) that holds a copy of the task's stderr: it waits for the
// sandbox process (the create's --pid-file) to exit, and if the OOM kill
// count of the sandbox's memory cgroup went up meanwhile it writes
// api.OOMMessage there. Holding stderr open also means containerd's
// shim drains it — and so delivers the message — before the task's delete
// completes. The watcher is outside the sandbox's cgroup (in the caller's,
// the shim's), so the OOM killer does not pick it, and it exits with the
// sandbox or when the create fails.
package oomwatch

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
)

// WatchCommand is gvx-sentry's internal subcommand (argv[1]) for the
// watcher: WatchCommand <creator pid> <pid file> <limit bytes>.
const WatchCommand = "gvx-oom-watch"

// Spawn starts the watcher for a create of spec whose sandbox's pid lands
// in pidFile; it does nothing without a memory limit, a pid file, or a
// stderr (a terminal task has its output on its console instead). Errors
// only lose the message, so they are not returned.
func Spawn(spec *specs.Spec, pidFile string) {
	if pidFile == "" || spec == nil || spec.Linux == nil || spec.Linux.Resources == nil ||
		spec.Linux.Resources.Memory == nil || spec.Linux.Resources.Memory.Limit == nil ||
		*spec.Linux.Resources.Memory.Limit <= 0 || (spec.Process != nil && spec.Process.Terminal) {
		return
	}
	if st, err := os.Stderr.Stat(); err != nil || st.Mode()&os.ModeCharDevice != 0 {
		return
	}
	abs, err := filepath.Abs(pidFile)
	if err != nil {
		return
	}
	cmd := exec.Command("/proc/self/exe", WatchCommand, strconv.Itoa(os.Getpid()), abs, strconv.FormatInt(*spec.Linux.Resources.Memory.Limit, 10))
	cmd.Stderr = os.Stderr
	// Its own session: signals to the create's process group do not
	// reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return
	}
	_ = cmd.Process.Release()
}

// Watch is the watcher's body (args: what follows WatchCommand).
func Watch(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("usage: %s <creator pid> <pid file> <limit>", WatchCommand)
	}
	creator, err1 := strconv.Atoi(args[0])
	limit, err2 := strconv.ParseInt(args[2], 10, 64)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("%s: bad arguments %q", WatchCommand, args)
	}
	cfd, err := unix.PidfdOpen(creator, 0)
	if err != nil {
		return nil // the create is over already
	}
	defer unix.Close(cfd)
	pid := 0
	for pid == 0 {
		if b, err := os.ReadFile(args[1]); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
				pid = n
				break
			}
		}
		if exited(cfd, 20*time.Millisecond) {
			// The create ended: its pid file is complete now, or there
			// is no sandbox.
			b, err := os.ReadFile(args[1])
			if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil || pid <= 0 {
				return nil
			}
		}
	}
	sfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(sfd)
	events, err := openOOMEvents(pid)
	if err != nil {
		return nil
	}
	defer events.Close()
	before := oomKills(events)
	for !exited(sfd, -1) {
	}
	if oomKills(events) > before {
		_, _ = os.Stderr.WriteString(api.OOMMessage(limit))
	}
	return nil
}

// exited waits up to timeout (negative: for ever) for the process of pidfd
// fd to exit.
func exited(fd int, timeout time.Duration) bool {
	ms := -1
	if timeout >= 0 {
		ms = int(timeout / time.Millisecond)
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, ms)
	return err == nil && n > 0
}

// openOOMEvents opens the file of pid's memory cgroup that counts OOM
// kills: v2 memory.events, v1 memory.oom_control. An open file still reads
// after the cgroup is removed.
func openOOMEvents(pid int) (*os.File, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "memory" {
				return os.Open(filepath.Join("/sys/fs/cgroup/memory", f[2], "memory.oom_control"))
			}
		}
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			if f, err := os.Open(filepath.Join("/sys/fs/cgroup", p, "memory.events")); err == nil {
				return f, nil
			}
			return os.Open(filepath.Join("/sys/fs/cgroup/unified", p, "memory.events"))
		}
	}
	return nil, fmt.Errorf("no memory cgroup for pid %d", pid)
}

// oomKills reads the "oom_kill N" line of an OOM events file.
func oomKills(f *os.File) int64 {
	b := make([]byte, 4096)
	n, _ := f.ReadAt(b, 0)
	sc := bufio.NewScanner(bytes.NewReader(b[:n]))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			k, _ := strconv.ParseInt(v, 10, 64)
			return k
		}
	}
	return 0
}
