// Package subcontainer runs a container inside a sandbox that is already
// running.
//
// The sandbox is a pod's or one of gvx's warm pool, and the container gets
// the process model containerd's runc shim expects of a runc-compatible
// runtime:
//
//   - `create` creates the container in the sandbox and leaves behind a
//     monitor process, whose pid it writes to the pid file: the monitor
//     stands for the container's init on the host (the shim reaps it).
//   - `start` asks the monitor, over a unix socket in the sentry root, to
//     start the container with the stdio `create` was given.
//   - the monitor then drops its privileges, waits for the container and
//     exits with its status (api.ExitCode: 128+n for a death by signal n),
//     which the shim reports as the task's exit.
//
// gVisor's own sub-container commands write the sandbox's pid and take
// stdio at start, so a runc-style shim would neither see the container
// exit nor connect its stdio; this package closes that gap.
package subcontainer
