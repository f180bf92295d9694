// Command gvx-pause is the init of a gvx warm-pool sandbox's root container.
//
// It holds the sandbox open until it is told to stop (SIGTERM, SIGINT or
// SIGHUP). In an image pool's sandbox a task's process is started beside
// it, and processes that process leaves behind become gvx-pause's children:
// it reaps them, as an init must.
//
// `gvx-pause reset` (api.PauseResetCommand), exec'd in the root container
// by a pool sandbox's reset, restores what containers share and reports
// the guest's state (reset.go); `gvx-pause uts` (api.PauseUTSCommand)
// gives the sandbox the hostname of the task that adopted it.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == api.PauseResetCommand {
		os.Exit(reset(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == api.PauseUTSCommand {
		os.Exit(uts(os.Args[2:]))
	}
	// Not dumpable: processes of the sandbox's user without
	// CAP_SYS_PTRACE cannot reach the root container's own root through
	// /proc/1/root (or /proc/1/cwd): a lease's commands, which run in a
	// lease root stacked on it, would otherwise write the files every
	// later lease starts from.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "gvx-pause: PR_SET_DUMPABLE: %v\n", err)
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[1] == api.PauseAgentArg {
		go leaseAgent(os.Stdin)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	child := make(chan os.Signal, 1)
	signal.Notify(child, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			return
		case <-child:
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
