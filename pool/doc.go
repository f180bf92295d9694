// Package pool is the warm-pool server: it keeps gVisor sandboxes booted
// ahead of demand and hands each to one task at a time.
//
// `gvx pool serve` (Server) boots sandboxes whose root container runs
// gvx-pause (package bootspec says how), keeps Size of them ready, and
// answers claims on a unix socket (package client is the protocol and the
// client the shim links). The shim claims one at task Create and creates
// the task in it — as a container inside it, or, for an image pool's
// sandbox booted on the task's image, as a process in its root container.
// When a task that ran as a container is deleted, its shim hands the
// sandbox back (pool.reset): the server restores and verifies it against
// its state at boot and makes it ready again, or destroys it (reset.go);
// other sandboxes are destroyed with their task (sandbox.Destroy). A
// claimed sandbox belongs to its task — its claimed marker names the task
// — and the server owns the ready ones and those it took back.
//
// A task can adopt a pool sandbox only if the sandbox was booted the way
// the task's own would be (the same class) and the task needs nothing
// fixed at boot that the pool could not know (package adopt decides).
package pool
