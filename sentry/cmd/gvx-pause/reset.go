package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
)

// sysvScan bounds the ids tried for semaphore sets and message queues
// (gVisor hands ids out in sequence from 1; what is left beyond is
// reported, and the reset then fails).
const sysvScan = 4096

// uts is api.PauseUTSCommand: run in the root container of a pool
// sandbox (with CAP_SYS_ADMIN) before an adopting task starts, it sets
// the hostname and domain name the task's spec asks for.
func uts(args []string) int {
	fs := flag.NewFlagSet(api.PauseUTSCommand, flag.ContinueOnError)
	host := fs.String("hostname", "", "hostname to set")
	domain := fs.String("domainname", "", "domain name to set")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := unix.Sethostname([]byte(*host)); err != nil {
		fmt.Fprintf(os.Stderr, "sethostname %q: %v\n", *host, err)
		return 1
	}
	if err := unix.Setdomainname([]byte(*domain)); err != nil {
		fmt.Fprintf(os.Stderr, "setdomainname %q: %v\n", *domain, err)
		return 1
	}
	return 0
}

// reset is api.PauseResetCommand: run in the root container of a pool
// sandbox (with CAP_SYS_ADMIN and CAP_IPC_OWNER) after a task's container
// is gone, it restores the hostname and domain name and removes the SysV
// IPC objects left — every container of a gVisor sandbox shares the root
// container's UTS and IPC namespaces — then prints the guest's state.
func reset(args []string) int {
	fs := flag.NewFlagSet(api.PauseResetCommand, flag.ContinueOnError)
	host := fs.String("hostname", "", "hostname to restore")
	domain := fs.String("domainname", "", "domain name to restore")
	restore := fs.Bool("restore", true, "restore (false: only report)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var st api.GuestState
	fail := func(format string, a ...any) { st.Errors = append(st.Errors, fmt.Sprintf(format, a...)) }
	if *restore {
		restoreShared(*host, *domain, fail)
	}
	report(&st, fail)
	if err := json.NewEncoder(os.Stdout).Encode(&st); err != nil {
		return 1
	}
	return 0
}

// restoreShared puts back the hostname and domain name and removes the
// SysV IPC objects left.
func restoreShared(host, domain string, fail func(string, ...any)) {
	if err := unix.Sethostname([]byte(host)); err != nil {
		fail("sethostname: %v", err)
	}
	if err := unix.Setdomainname([]byte(domain)); err != nil {
		fail("setdomainname: %v", err)
	}
	removeSysV()
}

// report fills st with the guest's state.
func report(st *api.GuestState, fail func(string, ...any)) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		fail("uname: %v", err)
	}
	st.Hostname, st.Domainname = unix.ByteSliceToString(u.Nodename[:]), unix.ByteSliceToString(u.Domainname[:])
	var err error
	if _, st.ShmPages, err = shmInfo(); err != nil {
		fail("shm_info: %v", err)
	}
	if st.Semaphores, err = semCount(); err != nil {
		fail("sem_info: %v", err)
	}
	if st.Queues, err = msgCount(); err != nil {
		fail("msg_info: %v", err)
	}
	st.Processes = processes(fail)
	for _, f := range []string{"tcp", "tcp6", "udp", "udp6", "unix"} {
		n, err := countLines("/proc/net/" + f)
		if err != nil {
			fail("%v", err)
		}
		st.Sockets += max(n-1, 0) // a header line
	}
	if st.Mounts, err = countLines("/proc/1/mountinfo"); err != nil {
		fail("%v", err)
	}
	if st.MemUsedKiB, err = memUsed(); err != nil {
		fail("%v", err)
	}
}

// removeSysV removes every SysV shared memory segment, semaphore set and
// message queue.
func removeSysV() {
	if last, pages, err := shmInfo(); err == nil && pages > 0 {
		for id := 0; id <= last; id++ {
			_, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil)
		}
	}
	for id := 0; id < sysvScan; id++ {
		if id%64 == 0 {
			if n, err := semCount(); err != nil || n == 0 {
				break
			}
		}
		_, _, _ = unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), 0, unix.IPC_RMID, 0, 0, 0)
	}
	for id := 0; id < sysvScan; id++ {
		if id%64 == 0 {
			if n, err := msgCount(); err != nil || n == 0 {
				break
			}
		}
		_, _, _ = unix.Syscall(unix.SYS_MSGCTL, uintptr(id), unix.IPC_RMID, 0)
	}
}

// IPC info commands (linux/shm.h, sem.h, msg.h).
const (
	shmInfoCmd = 14
	semInfoCmd = 19
	msgInfoCmd = 12
)

// shmInfo is shmctl(SHM_INFO): used_ids (on gVisor, the last id handed
// out) and shm_tot (pages of the segments that exist).
func shmInfo() (lastID int, pages int64, err error) {
	var buf [64]byte
	if _, _, e := unix.Syscall(unix.SYS_SHMCTL, 0, shmInfoCmd, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
		return 0, 0, e
	}
	return int(int32(binary.NativeEndian.Uint32(buf[0:]))), int64(binary.NativeEndian.Uint64(buf[8:])), nil
}

// semCount is semctl(SEM_INFO)'s semusz: the semaphore sets that exist.
func semCount() (int, error) {
	var buf [64]byte
	if _, _, e := unix.Syscall6(unix.SYS_SEMCTL, 0, 0, semInfoCmd, uintptr(unsafe.Pointer(&buf[0])), 0, 0); e != 0 {
		return 0, e
	}
	return int(int32(binary.NativeEndian.Uint32(buf[28:]))), nil
}

// msgCount is msgctl(MSG_INFO)'s msgpool: on gVisor, the queues that
// exist.
func msgCount() (int, error) {
	var buf [64]byte
	if _, _, e := unix.Syscall(unix.SYS_MSGCTL, 0, msgInfoCmd, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
		return 0, e
	}
	return int(int32(binary.NativeEndian.Uint32(buf[0:]))), nil
}

// processes lists the guest's processes but pid 1 and this one.
func processes(fail func(string, ...any)) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		fail("read /proc: %v", err)
		return nil
	}
	self := os.Getpid()
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 || pid == self {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			continue // exited meanwhile
		}
		out = append(out, fmt.Sprintf("%d %s", pid, strings.TrimSpace(string(comm))))
	}
	return out
}

func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		n++
	}
	return n, nil
}

// memUsed is MemTotal − MemFree of /proc/meminfo, in KiB.
func memUsed() (int64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	var total, free int64 = -1, -1
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "MemTotal:":
			total = v
		case "MemFree:":
			free = v
		}
	}
	if total < 0 || free < 0 {
		return 0, fmt.Errorf("/proc/meminfo: no MemTotal or MemFree")
	}
	return total - free, nil
}
