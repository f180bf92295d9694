package api

import "syscall"

// ExitSignaled is the exit status of a process standing for one killed by
// signal sig: 128+sig, as shells and containerd report it.
func ExitSignaled(sig syscall.Signal) int { return 128 + int(sig) }

// ExitKilled is the status reported for a process that cannot have run
// to an exit of its own: its sandbox went away, it was killed before it
// started, or the shim that watched it died.
var ExitKilled = ExitSignaled(syscall.SIGKILL)

// ExitCode is the exit status that stands for wait status ws.
func ExitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return ExitSignaled(ws.Signal())
	}
	return ws.ExitStatus()
}
