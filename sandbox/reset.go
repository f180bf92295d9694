package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/cgroups"
)

// Baseline is a pool sandbox's state as booted, before any task ran in
// it: what a reset must bring it back to.
type Baseline struct {
	// Guest is the guest's state (gvx-pause's report).
	Guest api.GuestState `json:"guest"`
	// HostPids are the host processes in its cgroup that are not the
	// Sentry or its children (the root container's gofer).
	HostPids []int `json:"host_pids,omitempty"`
	// Limits are its cgroup's limit files and their contents (a task's
	// update of its resources may change them).
	Limits map[string]string `json:"limits,omitempty"`
	// OOMScoreAdj is the Sentry's oom_score_adj (a task's container that
	// asks for a score sets the sandbox's while it runs; nil in records
	// from before it was kept).
	OOMScoreAdj *int `json:"oom_score_adj,omitempty"`
}

// MemSlackKiB is how far above its boot baseline a reset sandbox's guest
// memory may stay (the Sentry keeps some caches warm after a task).
const MemSlackKiB = 64 << 10

// Reasons a reset's verification fails (the metrics' reason label).
const (
	ResetProbe     = "probe"          // gvx-pause's report could not be had
	ResetProcesses = "processes"      // guest processes left
	ResetHostname  = "hostname"       // hostname or domain name not restored
	ResetSysV      = "sysv_ipc"       // SysV IPC objects left
	ResetSockets   = "sockets"        // more guest sockets than at boot
	ResetMounts    = "mounts"         // the root container's mounts changed
	ResetMemory    = "memory"         // guest memory well above its baseline
	ResetHostProcs = "host_processes" // host processes beyond the baseline's
	ResetHost      = "host"           // the task's host resources not all released
	ResetNetwork   = "network"        // the NAT's policy could not be put back
	ResetLimits    = "cgroup_limits"  // the sandbox's cgroup limits changed
	ResetOOMScore  = "oom_score_adj"  // the Sentry's oom_score_adj not restored
)

// ResetError is a failed reset: Reason is one of the Reset* constants.
type ResetError struct {
	Reason string
	Detail string
}

func (e *ResetError) Error() string { return fmt.Sprintf("reset failed (%s): %s", e.Reason, e.Detail) }

// RecordBaseline probes the freshly booted sandbox and records what a
// reset must bring it back to.
func (s *Sandbox) RecordBaseline(ctx context.Context) error {
	st, err := s.Probe(ctx, false)
	if err != nil {
		return err
	}
	if len(st.Errors) > 0 || len(st.Processes) > 0 {
		return fmt.Errorf("sandbox %s at boot: processes %q, errors %q", s.ID, st.Processes, st.Errors)
	}
	s.Baseline = &Baseline{Guest: *st, HostPids: s.hostExtras(), Limits: limits(s.Cgroup)}
	if score, err := s.oomScoreAdj(); err == nil {
		s.Baseline.OOMScoreAdj = &score
	}
	return nil
}

// oomScoreAdj reads the Sentry's oom_score_adj.
func (s *Sandbox) oomScoreAdj() (int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", s.pid()))
	if err != nil {
		return 0, fmt.Errorf("sandbox %s: %w", s.ID, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, fmt.Errorf("sandbox %s: oom_score_adj %q: %w", s.ID, data, err)
	}
	return n, nil
}

// Verify compares the guest's state after a reset (st) and the sandbox's
// host processes with its baseline; a *ResetError says what differs.
func (s *Sandbox) Verify(st *api.GuestState) error {
	if err := s.VerifyGuest(st); err != nil {
		return err
	}
	return s.verifyHost()
}

// VerifyGuest is Verify's check of the guest's state alone: enough for
// a lease pool's sandbox, whose leases change nothing on the host (no
// task: no containerd update of its cgroup or OOM score, no monitor or
// gofer of a container).
func (s *Sandbox) VerifyGuest(st *api.GuestState) error {
	b := s.Baseline
	if b == nil {
		return &ResetError{ResetProbe, "no baseline recorded at boot"}
	}
	g := b.Guest
	switch {
	case len(st.Errors) > 0:
		return &ResetError{ResetProbe, strings.Join(st.Errors, "; ")}
	case len(st.Processes) > 0:
		return &ResetError{ResetProcesses, strings.Join(st.Processes, ", ")}
	case st.Hostname != g.Hostname || st.Domainname != g.Domainname:
		return &ResetError{ResetHostname, fmt.Sprintf("%q/%q, booted with %q/%q", st.Hostname, st.Domainname, g.Hostname, g.Domainname)}
	case st.ShmPages != 0 || st.Semaphores != 0 || st.Queues != 0:
		return &ResetError{ResetSysV, fmt.Sprintf("%d shm pages, %d semaphore sets, %d message queues", st.ShmPages, st.Semaphores, st.Queues)}
	case st.Sockets > g.Sockets:
		return &ResetError{ResetSockets, fmt.Sprintf("%d sockets, %d at boot", st.Sockets, g.Sockets)}
	case st.Mounts != g.Mounts:
		return &ResetError{ResetMounts, fmt.Sprintf("%d mounts in the root container, %d at boot", st.Mounts, g.Mounts)}
	case st.MemUsedKiB > g.MemUsedKiB+MemSlackKiB:
		return &ResetError{ResetMemory, fmt.Sprintf("%d KiB in use, %d KiB at boot (+ %d allowed)", st.MemUsedKiB, g.MemUsedKiB, MemSlackKiB)}
	}
	return nil
}

// verifyHost is Verify's check of the sandbox's host side: its OOM
// score, cgroup limits and host processes as at boot.
func (s *Sandbox) verifyHost() error {
	b := s.Baseline
	if b.OOMScoreAdj != nil {
		if score, err := s.oomScoreAdj(); err != nil || score != *b.OOMScoreAdj {
			return &ResetError{ResetOOMScore, fmt.Sprintf("%d (%v), %d at boot", score, err, *b.OOMScoreAdj)}
		}
	}
	now := limits(s.Cgroup)
	for f, v := range b.Limits {
		if now[f] != v {
			return &ResetError{ResetLimits, fmt.Sprintf("%s is %q, %q at boot", f, now[f], v)}
		}
	}
	if extra := s.hostExtras(); len(extra) > 0 {
		var left []string
		for _, pid := range extra {
			if !slices.Contains(b.HostPids, pid) {
				comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
				left = append(left, fmt.Sprintf("%d %s", pid, strings.TrimSpace(string(comm))))
			}
		}
		if len(left) > 0 {
			return &ResetError{ResetHostProcs, strings.Join(left, ", ")}
		}
	}
	return nil
}

// hostExtras are the processes in the sandbox's cgroup that are neither
// the Sentry nor its descendants (its stub processes).
func (s *Sandbox) hostExtras() []int {
	tree := map[int]bool{}
	var walk func(pid int)
	walk = func(pid int) {
		tree[pid] = true
		tids, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, t := range tids {
			data, _ := os.ReadFile(t)
			for _, c := range strings.Fields(string(data)) {
				if child, err := strconv.Atoi(c); err == nil && !tree[child] {
					walk(child)
				}
			}
		}
	}
	walk(s.pid())
	var out []int
	for _, pid := range cgroups.Procs(s.Cgroup) {
		if !tree[pid] {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}

// limitFiles are the cgroup files (v1 controller/file, v2 file) holding a
// sandbox's resource limits.
var limitFiles = []string{
	"memory/memory.limit_in_bytes", "memory/memory.soft_limit_in_bytes", "cpu/cpu.cfs_quota_us", "cpu/cpu.shares", "pids/pids.max",
	"memory.max", "memory.high", "cpu.max", "cpu.weight", "pids.max",
}

// limits reads the limit files of the cgroup at path that exist.
func limits(path string) map[string]string {
	if path == "" {
		return nil
	}
	out := map[string]string{}
	for _, f := range limitFiles {
		dir, file := filepath.Split(f)
		p := filepath.Join("/sys/fs/cgroup", dir, path, file)
		if data, err := os.ReadFile(p); err == nil {
			out[p] = strings.TrimSpace(string(data))
		}
	}
	return out
}
