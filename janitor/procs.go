package janitor

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/procfs"
)

// proc is one host process as /proc shows it.
type proc struct {
	pid, ppid int
	exe       string // base name of the executable ("" if unreadable)
	args      []string
	cwd       string
	started   time.Time
	cgroup    string // its cgroup (the memory or pids hierarchy's, else v2's)
}

// gvxBinaries are the executables of gvx's host processes.
var gvxBinaries = map[string]bool{
	api.ShimBinary: true, api.ShimServerBinary: true, api.SentryBinary: true, api.RuntimeBinary: true, api.PauseBinary: true, api.CLIBinary: true,
	api.NATBinary: true,
}

// sandboxBinaries are those of a sandbox's own processes (Sentry, gofer,
// stubs, monitors, exec waiters, NAT).
var sandboxBinaries = map[string]bool{api.SentryBinary: true, api.RuntimeBinary: true, api.PauseBinary: true, api.NATBinary: true}

// procTable reads every process: all of them for ancestry, and gvx's in
// detail.
func procTable() map[int]*proc {
	boot := bootTime()
	out := map[int]*proc{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		p := &proc{pid: pid}
		if !readStat(d, boot, p) {
			continue
		}
		if exe, err := os.Readlink(filepath.Join(d, "exe")); err == nil {
			p.exe = filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
		}
		if gvxBinaries[p.exe] {
			if data, err := os.ReadFile(filepath.Join(d, "cmdline")); err == nil {
				p.args = strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
			}
			p.cwd, _ = os.Readlink(filepath.Join(d, "cwd"))
			p.cgroup = cgroupOf(filepath.Join(d, "cgroup"))
		}
		out[pid] = p
	}
	return out
}

// readStat fills ppid and start time from /proc/<pid>/stat; false for a
// zombie or a process gone meanwhile.
func readStat(dir string, boot time.Time, p *proc) bool {
	data, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 || f[0] == "Z" {
		return false
	}
	p.ppid, _ = strconv.Atoi(f[1])
	ticks, _ := strconv.ParseInt(f[19], 10, 64)
	p.started = boot.Add(time.Duration(ticks) * time.Second / clockTicks)
	return true
}

// clockTicks is USER_HZ, the unit of /proc's start times (100 on every
// Linux architecture gvx runs on).
const clockTicks = 100

// bootTime is when the host booted (/proc/stat's btime).
func bootTime() time.Time {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "btime "); ok {
			s, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return time.Unix(s, 0)
		}
	}
	return time.Time{}
}

// cgroupOf reads a process's cgroup path: the memory hierarchy's on cgroup
// v1 (else pids'), the unified one's on v2.
func cgroupOf(file string) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	var v2, pids string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			switch c {
			case "memory":
				return parts[2]
			case "pids":
				pids = parts[2]
			}
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
	}
	if pids != "" {
		return pids
	}
	return v2
}

// flag is the value of command-line flag name (-name v, --name v,
// --name=v) in args.
func flag(args []string, name string) string {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// isShimServer: the long-running shim (not its start or delete command;
// the server is gvx-shim, started by containerd-shim-gvx-v2, shims from
// before that split run the latter's binary).
func (p *proc) isShimServer() bool {
	if (p.exe != api.ShimServerBinary && p.exe != api.ShimBinary) || len(p.args) == 0 {
		return false
	}
	last := p.args[len(p.args)-1]
	return last != "start" && last != "delete" && flag(p.args, "id") != "" && flag(p.args, "address") != ""
}

// isPoolServer: `gvx pool serve`.
func (p *proc) isPoolServer() bool {
	return p.exe == api.CLIBinary && len(p.args) > 2 && p.args[1] == "pool" && p.args[2] == "serve"
}

// describe names processes for a report.
func describe(ps []*proc) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d (%s)", p.pid, p.exe)
	}
	return b.String()
}

// stop sends SIGTERM to every process of ps, waits up to grace for them
// to exit, then sends SIGKILL to those left and waits for them briefly. It
// returns the strongest signal it needed.
func stop(ps []*proc, grace time.Duration) (string, error) {
	for _, p := range ps {
		_ = unix.Kill(p.pid, unix.SIGTERM)
	}
	if waitGone(ps, grace) {
		return "SIGTERM", nil
	}
	for _, p := range ps {
		_ = unix.Kill(p.pid, unix.SIGKILL)
	}
	if waitGone(ps, 5*time.Second) {
		return "SIGKILL", nil
	}
	var left []*proc
	for _, p := range ps {
		if procfs.Alive(p.pid) {
			left = append(left, p)
		}
	}
	return "SIGKILL", fmt.Errorf("still running 5s after SIGKILL: %s", describe(left))
}

// waitGone waits up to d until no process of ps is alive.
func waitGone(ps []*proc, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		alive := false
		for _, p := range ps {
			if procfs.Alive(p.pid) && sameProcess(p) {
				alive = true
				break
			}
		}
		if !alive {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sameProcess: pid still names the process p was (not a reused pid).
func sameProcess(p *proc) bool {
	q := &proc{}
	if !readStat(fmt.Sprintf("/proc/%d", p.pid), bootTime(), q) {
		return false
	}
	return q.started.Sub(p.started).Abs() < time.Second
}
