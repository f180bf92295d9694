// Package procfs answers questions about host processes from /proc.
package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Alive reports whether process pid exists and is not a zombie.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain spaces and parentheses.
	i := strings.LastIndexByte(string(data), ')')
	return i < 0 || i+2 >= len(data) || data[i+2] != 'Z'
}

// Threads lists the thread ids of process pid (none once it is gone).
func Threads(pid int) []int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}

// Identity names process pid as it runs now — its pid and its start time
// in clock ticks since boot ("4711:123456") — so that a later reader can
// tell it from another process the pid was reused for (Running); "" if
// it does not run.
func Identity(pid int) string {
	ticks, ok := startTicks(pid)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d:%d", pid, ticks)
}

// Running reports whether the process id (an Identity) still runs: the
// same pid started at the same time, not a zombie.
func Running(id string) bool {
	p, t, ok := strings.Cut(id, ":")
	pid, err := strconv.Atoi(p)
	if !ok || err != nil {
		return false
	}
	ticks, ok := startTicks(pid)
	return ok && strconv.FormatUint(ticks, 10) == t && Alive(pid)
}

// startTicks is process pid's start time in clock ticks since boot
// (/proc/PID/stat's 22nd field).
func startTicks(pid int) (uint64, bool) {
	if pid <= 0 {
		return 0, false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, false
	}
	// After the command name: state (field 3) … starttime (field 22).
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return 0, false
	}
	ticks, err := strconv.ParseUint(f[19], 10, 64)
	return ticks, err == nil
}
