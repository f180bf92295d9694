package api

import "fmt"

// HostPidsLimit is the host pids.max a sandbox gets when its guest may
// have guest tasks: the Sentry, its gofer and the platform's stub
// threads need host tasks of their own, and a guest that reached the
// host's limit first would crash the whole sandbox instead of seeing
// EAGAIN.
func HostPidsLimit(guest int64) int64 { return 2*guest + 256 }

// OOMMessage is what a sandbox's stderr gets when the host's OOM killer
// ended it at its memory limit (limit in bytes, 0 if unknown).
func OOMMessage(limit int64) string {
	if limit > 0 {
		return fmt.Sprintf("gvx: the sandbox was killed: out of memory (it reached its memory limit of %d MiB); exit status 137\n", limit>>20)
	}
	return "gvx: the sandbox was killed: out of memory (it reached its memory limit); exit status 137\n"
}

// RootfsSizeFlag is the gvx-sentry flag that caps a sandbox's root
// filesystem writes at size bytes: its overlay's upper layer is a file
// beside the root filesystem on the host's disk (gVisor's "self" medium),
// and a write past size fails with ENOSPC inside.
func RootfsSizeFlag(size int64) string {
	return fmt.Sprintf("--overlay2=root:self,size=%d", size)
}
