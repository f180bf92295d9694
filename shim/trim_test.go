package shim

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestTrimmerCoalesces(t *testing.T) {
	var runs atomic.Int32
	tr := trimmer{delay: 300 * time.Millisecond, trim: func() { runs.Add(1) }}
	for range 5 { // a burst of work: one trim, after it
		tr.soon()
		time.Sleep(10 * time.Millisecond)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("trimmed %d times during the burst, want 0", n)
	}
	time.Sleep(900 * time.Millisecond)
	if n := runs.Load(); n != 1 {
		t.Fatalf("trimmed %d times after the burst, want 1", n)
	}
	tr.soon() // later work: another trim
	time.Sleep(900 * time.Millisecond)
	if n := runs.Load(); n != 2 {
		t.Fatalf("trimmed %d times after more work, want 2", n)
	}
}
