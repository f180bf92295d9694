// Package rollout checkpoints, rolls back and forks gvx sandboxes for tree
// search (MCTS, Best-of-N): processes and files together.
//
// An Engine keeps Sandboxes: a sandbox has a stable id, and behind it a
// containerd container and task (its backing) that a rollback replaces.
// Checkpoint saves the backing's whole state into a Store — gVisor's
// kernel and memory through the Sentry's control socket (no runsc start-up
// per step), and the sandbox's ext4lite volumes copied at the same paused
// instant (package checkpoint) — and returns a Handle. Handles form a tree:
// a checkpoint taken after a rollback is a child of the handle rolled back
// to. A restore boots a new backing from a handle through containerd and
// the gvx shim (api.AnnotationRestoreFrom), with its own copies of the
// volumes; with Options.Spares > 0 the engine keeps that many restored
// backings paused per handle (hot spares), so that a rollback or a fork is
// two control calls — pause the old backing, resume a spare — instead of a
// restore. A spare's output is held back until it is promoted.
package rollout
