// Package exectask runs a task as a process in a running sandbox's root
// container.
//
// The sandbox is a warm-pool sandbox booted on the task's image, and the
// task gets the process model containerd's runc shim expects of a
// runc-compatible runtime. No container is created in the sandbox: there
// is no gofer to start and no root filesystem to mount, which is what
// makes adopting such a sandbox cheap.
//
//   - `create` records the task (a JSON file in the sentry root) and
//     leaves a monitor process whose pid is the task's init on the host;
//     it listens on the start socket subcontainer's `start` talks to.
//   - on start the monitor executes the spec's process in the sandbox's
//     root container with create's stdio, records its guest pid, then
//     drops to the sandbox's uid, waits for it and exits with its status.
//   - kill signals that process (or, with --all, every process in the
//     sandbox), saying api.NotRunning when the process or the sandbox is
//     gone; delete destroys the whole sandbox, which was the task's alone;
//     exec, ps, pause, resume, update, state and events are the sandbox
//     root container's, whose id replaces the task's on the command line
//     (Rewrite).
//
// The process is not pid 1 in the sandbox (gvx-pause is), and the
// sandbox's hostname is the pool's.
package exectask
