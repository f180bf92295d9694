package fastexec

import (
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sighandling"
	"gvisor.dev/gvisor/pkg/unet"
	"gvisor.dev/gvisor/pkg/urpc"
	"gvisor.dev/gvisor/runsc/boot"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/hostcreds"
)

// WaitCommand is the internal subcommand of the waiter.
const WaitCommand = api.SentryWaitCommand

// The waiter's fds: the end of the pipe carrying the guest pid, and its two
// control connections to the sandbox (wait, signals), opened by the exec.
const (
	pidFD  = 3
	waitFD = 4
	sigFD  = 5
)

// WaitMain is the waiter (gvx-sentry gvx-exec-wait <container id>, run
// first thing by gvx-sentry's main, before runsc's command line, which
// needs root): it stands for an exec'd process on the host with the
// sandbox's host credentials, which it has from its start, and returns
// the exec'd process's status (api.ExitCode; api.ExitKilled when the exec
// never started or the sandbox goes away).
func WaitMain(args []string) int {
	data, err := io.ReadAll(os.NewFile(pidFD, "pid"))
	pid, perr := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || perr != nil || len(args) != 1 {
		return api.ExitKilled // the exec never started
	}
	var conns []*urpc.Client
	for _, fd := range []int{waitFD, sigFD} {
		sock, err := unet.NewSocket(fd)
		if err != nil {
			log.Warningf("exec waiter: control connection (fd %d): %v", fd, err)
			return api.ExitKilled
		}
		conns = append(conns, urpc.NewClient(sock))
	}
	// Not dumpable, no_new_privs on every thread (its ids are already
	// the sandbox's).
	if err := hostcreds.Drop(syscall.Getuid(), syscall.Getgid()); err != nil {
		log.Warningf("exec waiter: %v", err)
	}
	return WaitFor(conns[0], conns[1], args[0], int32(pid))
}

// WaitFor forwards the signals this process receives to guest process pid of
// container cid (over sigConn), waits for it (over waitConn) and returns the
// exit code that stands for its status (api.ExitCode; api.ExitKilled when
// the sandbox goes away).
func WaitFor(waitConn, sigConn *urpc.Client, cid string, pid int32) int {
	stop := sighandling.StartSignalForwarding(func(sig linux.Signal) {
		args := boot.SignalArgs{CID: cid, Signo: int32(sig), PID: pid, Mode: boot.DeliverToProcess}
		if err := sigConn.Call(boot.ContMgrSignal, &args, nil); err != nil {
			log.Warningf("exec waiter: forward signal %d: %v", sig, err)
		}
	})
	var status uint32
	err := waitConn.Call(boot.ContMgrWaitPID, &boot.WaitPIDArgs{PID: pid, CID: cid}, &status)
	stop()
	if err != nil {
		return api.ExitKilled
	}
	return api.ExitCode(syscall.WaitStatus(status))
}
