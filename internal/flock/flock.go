// Package flock releases flock(2) locks so that no forked process keeps them.
//
// A flock belongs to the open file description, not to the descriptor:
// every process forked while a locked file is open (any os/exec start, in
// any goroutine) holds a copy of its descriptor until it execs, and
// closing the original alone leaves the lock held by that copy for as
// long as the child takes. Close unlocks first, which releases the lock
// whatever copies exist.
package flock

import (
	"os"

	"golang.org/x/sys/unix"
)

// Close unlocks f and closes it.
func Close(f *os.File) error {
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return f.Close()
}
