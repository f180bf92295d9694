package slots

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestSlots: Size slots can be held at once, the next acquire is refused,
// a release frees one, and a process that dies frees what it held.
func TestSlots(t *testing.T) {
	s := Set{Dir: t.TempDir(), Size: 3}
	var held []*Slot
	for range 3 {
		sl, err := s.Acquire()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, sl)
	}
	if _, err := s.Acquire(); !errors.Is(err, ErrFull) {
		t.Fatalf("fourth acquire: %v, want ErrFull", err)
	}
	if n, err := s.Held(); err != nil || n != 3 {
		t.Fatalf("held %d, %v; want 3", n, err)
	}
	held[1].Release()
	held[1].Release()
	sl, err := s.Acquire()
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	for _, h := range append(held, sl) {
		h.Release()
	}
	if n, _ := s.Held(); n != 0 {
		t.Fatalf("held %d after releasing all", n)
	}

	// Other processes hold every slot (a shell that locks the file with
	// flock(1) and becomes sleep, keeping the descriptor), then are
	// killed: their slots are free again.
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("no flock(1)")
	}
	var procs []*exec.Cmd
	for i := range 3 {
		c := exec.Command("sh", "-c", "exec 9>\"$0\" && flock -x 9 && exec sleep 60", s.Dir+"/"+strconv.Itoa(i))
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for n, _ := s.Held(); n != 3; n, _ = s.Held() {
		if time.Now().After(deadline) {
			t.Fatalf("flock processes hold %d slots", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := s.Acquire(); !errors.Is(err, ErrFull) {
		t.Fatalf("acquire while another process holds all: %v", err)
	}
	for _, c := range procs {
		c.Process.Signal(os.Kill)
		c.Wait()
	}
	sl, err = s.Acquire()
	if err != nil {
		t.Fatalf("after the holder died: %v", err)
	}
	sl.Release()
}

// TestReleaseWithCopiesHeld: a released slot is free even while a process
// forked before the release (here one that keeps the descriptor for good)
// still holds a copy of its descriptor.
func TestReleaseWithCopiesHeld(t *testing.T) {
	s := Set{Dir: t.TempDir(), Size: 1}
	sl, err := s.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{sl.f}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		child.Process.Kill()
		child.Wait()
	}()
	sl.Release()
	if n, err := s.Held(); err != nil || n != 0 {
		t.Fatalf("held %d, %v after the release; want 0", n, err)
	}
	again, err := s.Acquire()
	if err != nil {
		t.Fatalf("acquire after the release: %v", err)
	}
	again.Release()
}
