package cgroups

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Usage is what a cgroup's processes use now.
type Usage struct {
	CPUNanos    uint64 // CPU time used so far
	MemoryBytes uint64 // memory charged (page cache included)
	MemoryCache uint64 // of which page cache
	MemoryLimit uint64 // its cap (0: none)
	Pids        uint64 // tasks (threads)
}

// mountRoot is where the cgroup hierarchies are mounted.
var mountRoot = "/sys/fs/cgroup"

// ReadUsage reads the use of the cgroup at path (a path under every v1
// hierarchy, or under the v2 mount).
func ReadUsage(path string) (Usage, error) {
	if path == "" {
		return Usage{}, fmt.Errorf("no cgroup path")
	}
	v1 := filepath.Join(mountRoot, "memory", path)
	if _, err := os.Stat(v1); err == nil {
		return readV1(path)
	}
	dir := filepath.Join(mountRoot, path)
	if _, err := os.Stat(filepath.Join(dir, "memory.current")); err != nil {
		return Usage{}, fmt.Errorf("cgroup %s: neither %s nor a v2 cgroup at %s", path, v1, dir)
	}
	return readV2(dir)
}

// ReadMemory reads only the memory charged to the cgroup at path (v1 or
// v2): one file, for callers that sample it often.
func ReadMemory(path string) (uint64, error) {
	if path == "" {
		return 0, fmt.Errorf("no cgroup path")
	}
	v, err := readUint(filepath.Join(mountRoot, "memory", path, "memory.usage_in_bytes"))
	if err == nil {
		return v, nil
	}
	return readUint(filepath.Join(mountRoot, path, "memory.current"))
}

func readV1(path string) (Usage, error) {
	var u Usage
	var err error
	at := func(ctrl, file string) string { return filepath.Join(mountRoot, ctrl, path, file) }
	if u.MemoryBytes, err = readUint(at("memory", "memory.usage_in_bytes")); err != nil {
		return u, err
	}
	if u.MemoryLimit, err = readUint(at("memory", "memory.limit_in_bytes")); err != nil {
		return u, err
	}
	if u.MemoryLimit >= 1<<62 {
		u.MemoryLimit = 0 // "unlimited" is the page-rounded max
	}
	stat, err := readStat(at("memory", "memory.stat"))
	if err != nil {
		return u, err
	}
	u.MemoryCache = stat["cache"]
	if u.CPUNanos, err = readUint(at("cpuacct", "cpuacct.usage")); err != nil {
		return u, err
	}
	u.Pids, _ = readUint(at("pids", "pids.current")) // the pids controller is optional
	return u, nil
}

func readV2(dir string) (Usage, error) {
	var u Usage
	var err error
	if u.MemoryBytes, err = readUint(filepath.Join(dir, "memory.current")); err != nil {
		return u, err
	}
	u.MemoryLimit, _ = readUint(filepath.Join(dir, "memory.max")) // "max": 0, none
	stat, err := readStat(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return u, err
	}
	u.MemoryCache = stat["file"]
	cpu, err := readStat(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return u, err
	}
	u.CPUNanos = cpu["usage_usec"] * 1000
	u.Pids, _ = readUint(filepath.Join(dir, "pids.current"))
	return u, nil
}

// readUint reads a file holding one number.
func readUint(file string) (uint64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	return v, nil
}

// readStat reads a file of "key value" lines.
func readStat(file string) (map[string]uint64, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, sc.Err()
}
