package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Where a variant's CPU goes: every process's CPU time inside the run's
// window, by command name. Processes alive at both ends count the
// difference of their /proc times; processes that exit during the run are
// read from the kernel's BSD process accounting (acct(2), version 3
// records), which the bench switches on for the window — that is what
// sees the short-lived ones (shim start and delete binaries, gvx-sentry's
// CLI calls, gofers, Sentries of destroyed sandboxes). The host's other
// processes are counted too, under their own names.

// userHZ is the unit of /proc/<pid>/stat and of acct records (AHZ).
const userHZ = 100

// procTime is one process's CPU time so far.
type procTime struct {
	comm  string
	ticks int64
}

// procSnapshot reads the CPU time of every process on the host.
func procSnapshot() map[int]procTime {
	out := map[int]procTime{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(data)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(s[close+1:])
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[pid] = procTime{comm: s[open+1 : close], ticks: ut + st}
	}
	return out
}

// cpuWindow measures the CPU of every process between its start and
// stop.
type cpuWindow struct {
	file  string
	start map[int]procTime
}

// startCPUWindow switches process accounting on into a fresh file and
// snapshots the running processes. Only root may; without it the
// breakdown is skipped (an error says so).
func startCPUWindow() (*cpuWindow, error) {
	f, err := os.CreateTemp("", "gvx-churn-acct-")
	if err != nil {
		return nil, fmt.Errorf("process accounting file: %w", err)
	}
	f.Close()
	if err := unix.Acct(f.Name()); err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("switch process accounting on (acct(2), needs root and CONFIG_BSD_PROCESS_ACCT): %w", err)
	}
	return &cpuWindow{file: f.Name(), start: procSnapshot()}, nil
}

// windowUse is what the window saw of one command name: CPU time, and how
// many processes of that name exited in it (each a start of the binary,
// short-lived ones: shim start and delete binaries, CLI calls, gofers).
type windowUse struct {
	cpu   time.Duration
	exits int
}

// stop switches accounting off and returns what was spent in the window
// by command name.
func (w *cpuWindow) stop() (map[string]windowUse, error) {
	end := procSnapshot()
	_, _, errno := unix.Syscall(unix.SYS_ACCT, 0, 0, 0) // acct(NULL): off
	defer os.Remove(w.file)
	if errno != 0 {
		return nil, fmt.Errorf("switch process accounting off: %w", errno)
	}
	data, err := os.ReadFile(w.file)
	if err != nil {
		return nil, fmt.Errorf("read process accounting: %w", err)
	}
	ticks := map[string]int64{}
	exits := map[string]int{}
	for pid, p := range end {
		t := p.ticks
		if s, ok := w.start[pid]; ok && s.comm == p.comm {
			t -= s.ticks
		}
		ticks[p.comm] += t
	}
	recs, err := parseAcct(data)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		t := r.ticks
		if s, ok := w.start[r.pid]; ok && strings.HasPrefix(s.comm, r.comm) {
			t -= s.ticks
		}
		ticks[r.comm] += max(t, 0)
		exits[r.comm]++
	}
	out := map[string]windowUse{}
	for c, t := range ticks {
		if t > 0 || exits[c] > 0 {
			out[c] = windowUse{cpu: time.Duration(t) * time.Second / userHZ, exits: exits[c]}
		}
	}
	return out, nil
}

// acctRecord is what the bench reads of one acct_v3 record.
type acctRecord struct {
	pid   int
	comm  string
	ticks int64
}

// acctV3 is the kernel's struct acct_v3 (include/uapi/linux/acct.h).
type acctV3 struct {
	Flag     uint8
	Version  uint8
	Tty      uint16
	Exitcode uint32
	UID, GID uint32
	Pid      uint32
	Ppid     uint32
	Btime    uint32
	Etime    float32
	Utime    uint16 // comp_t
	Stime    uint16
	Mem      uint16
	IO       uint16
	RW       uint16
	Minflt   uint16
	Majflt   uint16
	Swaps    uint16
	Comm     [16]byte
}

// parseAcct decodes a file of acct_v3 records.
func parseAcct(data []byte) ([]acctRecord, error) {
	size := int(unsafe.Sizeof(acctV3{}))
	if len(data)%size != 0 {
		return nil, fmt.Errorf("process accounting file: %d bytes is not a whole number of %d-byte records", len(data), size)
	}
	var out []acctRecord
	for off := 0; off < len(data); off += size {
		var r acctV3
		if _, err := binary.Decode(data[off:off+size], binary.NativeEndian, &r); err != nil {
			return nil, fmt.Errorf("process accounting record %d: %w", off/size, err)
		}
		if r.Version&0x7f != 3 {
			return nil, fmt.Errorf("process accounting record %d: version %d, want 3", off/size, r.Version)
		}
		comm := string(r.Comm[:])
		if i := strings.IndexByte(comm, 0); i >= 0 {
			comm = comm[:i]
		}
		out = append(out, acctRecord{pid: int(r.Pid), comm: comm, ticks: compT(r.Utime) + compT(r.Stime)})
	}
	return out, nil
}

// compT decodes a comp_t: a 13-bit mantissa and a 3-bit base-8 exponent.
func compT(v uint16) int64 {
	return int64(v&0x1fff) << (3 * (v >> 13))
}

// kinds names the processes of a cycle by their command names (the
// kernel's 15 characters).
var kinds = []struct{ prefix, kind string }{
	{"containerd-shim", "shim"},
	{"gvx-shim", "shim"},
	{"containerd", "containerd"},
	{"gvx-sentry", "gvx-sentry CLI"},
	{"gvx-runtime", "gvx-sentry CLI"},
	{"runsc-sandbox", "Sentry"},
	{"runsc-gofer", "gofer"},
	{"exe", "Sentry/gofer (exe)"},
	{"runsc", "runsc CLI"},
	{"gvx", "gvx pool serve"},
}

// breakdown groups per-command CPU into kinds and formats the largest
// per cycle, each with the processes of that kind that exited per cycle
// (×N: how many times a cycle starts it) when there were any.
func breakdown(by map[string]windowUse, cycles int) string {
	kind := map[string]windowUse{}
	var total time.Duration
	for comm, u := range by {
		k := comm
		for _, kd := range kinds {
			if strings.HasPrefix(comm, kd.prefix) {
				k = kd.kind
				break
			}
		}
		ku := kind[k]
		ku.cpu += u.cpu
		ku.exits += u.exits
		kind[k] = ku
		total += u.cpu
	}
	type kv struct {
		k string
		u windowUse
	}
	var all []kv
	for k, u := range kind {
		all = append(all, kv{k, u})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].u.cpu > all[j].u.cpu })
	n := float64(max(cycles, 1))
	var b strings.Builder
	fmt.Fprintf(&b, "%.1f ms/cycle:", float64(total.Microseconds())/1000/n)
	var rest time.Duration
	for i, e := range all {
		if i >= 8 || float64(e.u.cpu.Microseconds())/1000/n < 1 {
			rest += e.u.cpu
			continue
		}
		fmt.Fprintf(&b, " %s %.1f", e.k, float64(e.u.cpu.Microseconds())/1000/n)
		if e.u.exits > 0 {
			fmt.Fprintf(&b, " (×%.1f)", float64(e.u.exits)/n)
		}
		b.WriteString(",")
	}
	fmt.Fprintf(&b, " rest %.1f", math.Round(float64(rest.Microseconds())/100/n)/10)
	return b.String()
}
