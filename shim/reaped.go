package shim

import (
	"fmt"
	"os/exec"

	"github.com/containerd/containerd/v2/pkg/sys/reaper"
)

// runReaped runs cmd to its end through the shim's reaper and returns its
// exit status (128+n for a death by signal n). containerd's task service
// reaps every child of the shim on SIGCHLD, so exec.Cmd.Wait would race it
// and now and then find no child ("waitid: no child processes").
func runReaped(cmd *exec.Cmd) (int, error) {
	ec, err := reaper.Default.Start(cmd)
	if err != nil {
		return -1, err
	}
	return reaper.Default.Wait(cmd, ec)
}

// runReapedOK is runReaped with a non-zero exit status an error (what
// sandbox.RunWith takes).
func runReapedOK(cmd *exec.Cmd) error {
	code, err := runReaped(cmd)
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d", code)
	}
	return err
}
