// Package slots is a counting semaphore shared by every process of a node:
// a directory of slot files, each taken by an exclusive flock for as long
// as its holder keeps it open.
//
// A holder that dies frees its slots (the kernel drops its locks), so a
// killed shim never leaks capacity. The slot files themselves stay: they
// are the semaphore, at most Size of them, created on first use.
package slots

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/internal/flock"
)

// ErrFull is returned when every slot is held.
var ErrFull = errors.New("every slot is held")

// Set is Size slots in Dir.
type Set struct {
	Dir  string
	Size int
}

// Slot is a held slot; Release frees it.
type Slot struct{ f *os.File }

// Acquire takes a free slot, trying them from a random one on, or returns
// ErrFull.
func (s Set) Acquire() (*Slot, error) {
	if s.Size <= 0 {
		return nil, fmt.Errorf("slots %s: size %d", s.Dir, s.Size)
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("slots: %w", err)
	}
	first := rand.IntN(s.Size)
	for i := range s.Size {
		n := (first + i) % s.Size
		f, err := os.OpenFile(filepath.Join(s.Dir, strconv.Itoa(n)), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("slot: %w", err)
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &Slot{f: f}, nil
		}
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock slot %s: %w", f.Name(), err)
		}
	}
	return nil, ErrFull
}

// Held counts the slots some process holds.
func (s Set) Held() (int, error) {
	n := 0
	for i := range s.Size {
		f, err := os.Open(filepath.Join(s.Dir, strconv.Itoa(i)))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("slot: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
			n++
		}
		_ = flock.Close(f)
	}
	return n, nil
}

// Release frees the slot; it is safe on a nil slot and more than once.
func (sl *Slot) Release() {
	if sl != nil && sl.f != nil {
		_ = flock.Close(sl.f)
		sl.f = nil
	}
}
