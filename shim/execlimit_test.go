package shim

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

// TestExecLimit: a task's execs are counted until deleted; past the limit
// an exec is refused with ResourceExhausted naming max_execs; a reused id
// is not counted twice; a task's delete forgets its execs.
func TestExecLimit(t *testing.T) {
	s := &service{tasks: map[string]*gvxTask{}, execs: map[string]map[string]bool{}}
	for _, id := range []string{"a", "b", "a"} {
		if err := s.reserveExec("t1", id, 2); err != nil {
			t.Fatalf("exec %s: %v", id, err)
		}
	}
	err := s.reserveExec("t1", "c", 2)
	if !errdefs.IsResourceExhausted(err) || !strings.Contains(err.Error(), "max_execs") {
		t.Fatalf("third exec: %v", err)
	}
	if err := s.reserveExec("t2", "c", 2); err != nil {
		t.Fatalf("another task's exec: %v", err)
	}
	s.releaseExec("t1", "a")
	if err := s.reserveExec("t1", "c", 2); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
	s.releaseExec("t1", "")
	if len(s.execs["t1"]) != 0 {
		t.Fatalf("task delete left %v", s.execs["t1"])
	}
}
