// Package fastexec is gvx-sentry's detached exec, without a second runtime
// start-up.
//
// `exec --detach` is the call containerd's runc shim makes for every exec:
// it must start the process in the sandbox and leave behind a host process
// that stands for it (the shim reaps it for the exit status).
//
// runsc starts a second runsc that does the exec and waits, and polls for
// that child's pid file, so every exec pays two runtime start-ups in a row.
// Here the waiter is spawned first and starts up while this process runs
// the exec itself; the waiter gets the guest pid over a pipe, waits for
// the process (forwarding the signals it receives to it) and exits with
// its status. A terminal, extra file descriptors or a process given by
// flags instead of a process file go through runsc's own implementation.
package fastexec
