package shim

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/gvxrun/gvx/internal/slots"
)

// TestExecLimit: a task's execs are counted until deleted; past the limit
// an exec is refused with ResourceExhausted naming max_execs; a reused id
// is not counted twice; a task's delete forgets its execs.
func TestExecLimit(t *testing.T) {
	s := &service{tasks: map[string]*gvxTask{}, execs: map[string]map[string]*liveExec{}}
	for _, id := range []string{"a", "b", "a"} {
		if err := s.reserveExec("t1", id, 2, slots.Set{}); err != nil {
			t.Fatalf("exec %s: %v", id, err)
		}
	}
	err := s.reserveExec("t1", "c", 2, slots.Set{})
	if !errdefs.IsResourceExhausted(err) || !strings.Contains(err.Error(), "max_execs") {
		t.Fatalf("third exec: %v", err)
	}
	if err := s.reserveExec("t2", "c", 2, slots.Set{}); err != nil {
		t.Fatalf("another task's exec: %v", err)
	}
	s.releaseExec("t1", "a")
	if err := s.reserveExec("t1", "c", 2, slots.Set{}); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
	s.releaseExec("t1", "")
	if len(s.execs["t1"]) != 0 {
		t.Fatalf("task delete left %v", s.execs["t1"])
	}
}

// TestNodeExecLimit: the node's slots bound the execs of all tasks (and of
// other shims: a second service sharing the slot directory); a refusal
// names node_max_execs; deleting an exec, or a whole task, frees its
// slots.
func TestNodeExecLimit(t *testing.T) {
	node := slots.Set{Dir: t.TempDir(), Size: 3}
	a := &service{tasks: map[string]*gvxTask{}, execs: map[string]map[string]*liveExec{}}
	b := &service{tasks: map[string]*gvxTask{}, execs: map[string]map[string]*liveExec{}}
	for _, e := range []struct {
		s          *service
		task, exec string
	}{{a, "t1", "x"}, {a, "t2", "x"}, {b, "t3", "x"}, {a, "t1", "x"}} {
		if err := e.s.reserveExec(e.task, e.exec, 10, node); err != nil {
			t.Fatalf("%s/%s: %v", e.task, e.exec, err)
		}
	}
	err := b.reserveExec("t3", "y", 10, node)
	if !errdefs.IsResourceExhausted(err) || !strings.Contains(err.Error(), "node_max_execs") {
		t.Fatalf("fourth exec on the node: %v", err)
	}
	if len(b.execs["t3"]) != 1 {
		t.Fatalf("a refused exec was counted: %v", b.execs["t3"])
	}
	a.releaseExec("t1", "x")
	if err := b.reserveExec("t3", "y", 10, node); err != nil {
		t.Fatalf("after an exec's delete: %v", err)
	}
	a.releaseExec("t2", "")
	if n, err := node.Held(); err != nil || n != 2 {
		t.Fatalf("slots held %d (%v), want 2 (t3's)", n, err)
	}
	b.releaseExec("t3", "")
	if n, _ := node.Held(); n != 0 {
		t.Fatalf("slots held %d after every task's delete", n)
	}
}
