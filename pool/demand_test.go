package pool

import (
	"testing"
	"time"
)

// TestTarget: the pool aims at its size while claims are slow, grows with
// the claim rate up to max_size, and shrinks back once the rate falls.
func TestTarget(t *testing.T) {
	s := testServer(t, 2)
	s.cfg.Pool.MaxSize = 8
	s.bootTime = time.Second
	if got := s.target(); got != 2 {
		t.Errorf("no claims: target %d, want 2", got)
	}
	now := time.Now()
	for i := range 15 { // 1.5 claims/s: 3 sandboxes claimed per two boot times
		s.noteClaim(now.Add(-time.Duration(i) * 600 * time.Millisecond))
	}
	if got := s.target(); got != 3 {
		t.Errorf("1.5 claims/s, 1 s boots: target %d, want 3", got)
	}
	for range 100 {
		s.noteClaim(now)
	}
	if got := s.target(); got != 8 {
		t.Errorf("11.5 claims/s: target %d, want max_size 8", got)
	}
	s.claims = []time.Time{now.Add(-11 * time.Second)}
	if got := s.target(); got != 2 {
		t.Errorf("claims out of the window: target %d, want 2", got)
	}
	s.cfg.Pool.MaxSize = 2
	for range 100 {
		s.noteClaim(now)
	}
	if got := s.target(); got != 2 {
		t.Errorf("max_size = size: target %d, want 2", got)
	}
}

// TestNoteClaimWindow: claims older than the window are forgotten.
func TestNoteClaimWindow(t *testing.T) {
	s := testServer(t, 1)
	now := time.Now()
	s.noteClaim(now.Add(-20 * time.Second))
	s.noteClaim(now.Add(-5 * time.Second))
	s.noteClaim(now)
	if len(s.claims) != 2 {
		t.Errorf("claims kept: %v", s.claims)
	}
	if r := s.claimRate(now); r != 0.2 {
		t.Errorf("rate %v, want 0.2/s", r)
	}
}
