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
