package fastexec

import (
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/subcommands"
	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sighandling"
	"gvisor.dev/gvisor/pkg/urpc"
	"gvisor.dev/gvisor/runsc/boot"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/sandboxctl"
)

// WaitCommand is the internal subcommand of the waiter.
const WaitCommand = "gvx-exec-wait"

// pidFD is the waiter's end of the pipe carrying the guest pid.
const pidFD = 3

// Wait is the waiter: it stands for an exec'd process on the host. It
// waits with the sandbox's host credentials, not root's.
type Wait struct {
	util.InternalSubCommand
}

// Name implements subcommands.Command.
func (*Wait) Name() string { return WaitCommand }

// Synopsis implements subcommands.Command.
func (*Wait) Synopsis() string { return "internal: stands for an exec'd process until it exits" }

// Usage implements subcommands.Command.
func (*Wait) Usage() string { return WaitCommand + " <container id>\n" }

// SetFlags implements subcommands.Command.
func (*Wait) SetFlags(*flag.FlagSet) {}

// Execute implements subcommands.Command; the process exits with the exec'd
// process's status (api.ExitCode).
func (*Wait) Execute(_ context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	conf := args[0].(*config.Config)
	data, err := io.ReadAll(os.NewFile(pidFD, "pid"))
	pid, perr := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || perr != nil || f.NArg() != 1 {
		os.Exit(api.ExitKilled) // the exec never started
	}
	c, err := container.Load(conf.RootDir, container.FullID{ContainerID: f.Arg(0)}, container.LoadOpts{SkipCheck: true})
	if err != nil {
		os.Exit(api.ExitKilled)
	}
	WaitAndExit(c, int32(pid))
	return subcommands.ExitSuccess
}

// WaitAndExit stands for guest process pid of container c on the host: it
// connects to the sandbox, keeps only the sandbox's own host credentials,
// then waits (WaitFor).
func WaitAndExit(c *container.Container, pid int32) {
	// Two connections (a wait blocks one), opened while still root: the
	// control socket is root's. Then only the sandbox's own credentials.
	waitConn, err := sandboxctl.Connect(c)
	if err != nil {
		log.Warningf("exec waiter: %v", err)
		os.Exit(api.ExitKilled)
	}
	sigConn, err := sandboxctl.Connect(c)
	if err != nil {
		log.Warningf("exec waiter: %v", err)
		os.Exit(api.ExitKilled)
	}
	sandboxctl.DropPrivileges(c.Spec)
	os.Exit(WaitFor(waitConn, sigConn, c.ID, pid))
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
