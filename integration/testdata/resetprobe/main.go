// Command resetprobe is TestPoolReset's probe inside a pool sandbox's task.
//
//	resetprobe dirty     leave SysV IPC objects (shm, sem, msg) and set the hostname
//	resetprobe state     print "shm=<pages> sem=<sets> msg=<queues> host=<hostname>"
//	resetprobe fork N    as uid 1000 under RLIMIT_NPROC N, start sleeps until
//	                     fork fails; print "forked=<n> err=<errno name>"; the
//	                     sleeps are left running (with "keep") or killed
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: resetprobe dirty|state|fork N [keep]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "dirty":
		dirty()
	case "state":
		state()
	case "fork":
		n, _ := strconv.Atoi(os.Args[2])
		fork(n, len(os.Args) > 3 && os.Args[3] == "keep")
	}
}

const (
	ipcPrivate = 0
	ipcCreat   = 0o1000
	ipcRmid    = 0
	shmInfo    = 14
	semInfo    = 19
	msgInfo    = 12
)

func must(what string, _, _ uintptr, e syscall.Errno) {
	if e != 0 {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, e)
		os.Exit(1)
	}
}

func dirty() {
	id, _, e := syscall.Syscall(syscall.SYS_SHMGET, ipcPrivate, 1<<20, ipcCreat|0o600)
	must("shmget", 0, 0, e)
	_, _, e = syscall.Syscall(syscall.SYS_SHMAT, id, 0, 0) // attached, and left so
	must("shmat", 0, 0, e)
	r1, r2, e := syscall.Syscall(syscall.SYS_SEMGET, ipcPrivate, 4, ipcCreat|0o600)
	must("semget", r1, r2, e)
	r1, r2, e = syscall.Syscall(syscall.SYS_MSGGET, ipcPrivate, ipcCreat|0o600, 0)
	must("msgget", r1, r2, e)
	if err := syscall.Sethostname([]byte("dirty-host")); err != nil {
		fmt.Fprintln(os.Stderr, "sethostname:", err)
		os.Exit(1)
	}
	fmt.Println("dirty")
}

func state() {
	var buf [64]byte
	_, _, e := syscall.Syscall(syscall.SYS_SHMCTL, 0, shmInfo, uintptr(unsafe.Pointer(&buf[0])))
	must("shm_info", 0, 0, e)
	shm := binary.NativeEndian.Uint64(buf[8:])
	_, _, e = syscall.Syscall6(syscall.SYS_SEMCTL, 0, 0, semInfo, uintptr(unsafe.Pointer(&buf[0])), 0, 0)
	must("sem_info", 0, 0, e)
	sem := int32(binary.NativeEndian.Uint32(buf[28:]))
	_, _, e = syscall.Syscall(syscall.SYS_MSGCTL, 0, msgInfo, uintptr(unsafe.Pointer(&buf[0])))
	must("msg_info", 0, 0, e)
	msg := int32(binary.NativeEndian.Uint32(buf[0:]))
	host, _ := os.Hostname()
	fmt.Printf("shm=%d sem=%d msg=%d host=%s\n", shm, sem, msg, host)
}

func fork(limit int, keep bool) {
	lim := syscall.Rlimit{Cur: uint64(limit), Max: uint64(limit)}
	if err := syscall.Setrlimit(6 /* RLIMIT_NPROC */, &lim); err != nil {
		fmt.Fprintln(os.Stderr, "setrlimit:", err)
		os.Exit(1)
	}
	if err := syscall.Setgid(1000); err != nil {
		fmt.Fprintln(os.Stderr, "setgid:", err)
		os.Exit(1)
	}
	if err := syscall.Setuid(1000); err != nil {
		fmt.Fprintln(os.Stderr, "setuid:", err)
		os.Exit(1)
	}
	var pids []int
	var ferr error
	for i := 0; i < 10*limit; i++ {
		pid, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "1000"}, &syscall.ProcAttr{})
		if err != nil {
			ferr = err
			break
		}
		pids = append(pids, pid)
	}
	name := "none"
	if errno, ok := ferr.(syscall.Errno); ok && errno == syscall.EAGAIN {
		name = "EAGAIN"
	} else if ferr != nil {
		name = ferr.Error()
	}
	fmt.Printf("forked=%d err=%s\n", len(pids), name)
	if !keep {
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(p, &ws, 0, nil)
		}
	}
}
