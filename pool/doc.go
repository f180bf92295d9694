// Package pool is the warm-pool server: it keeps gVisor sandboxes booted
// ahead of demand and hands each to exactly one task.
//
// `gvx pool serve` (Server) boots sandboxes whose root container runs
// gvx-pause (package bootspec says how), keeps Size of them ready, and
// answers claims on a unix socket (package client is the protocol and the
// client the shim links). The shim claims one at task Create, creates the
// task in it — as a container inside it, or, for an image pool's sandbox
// booted on the task's image, as a process in its root container — and
// destroys the whole sandbox when the task is deleted (sandbox.Destroy): a
// sandbox never serves a second task. A claimed sandbox belongs to its
// task; the server only owns the ready ones.
//
// A task can adopt a pool sandbox only if the sandbox was booted the way
// the task's own would be (the same class) and the task needs nothing
// fixed at boot that the pool could not know (package adopt decides).
package pool
