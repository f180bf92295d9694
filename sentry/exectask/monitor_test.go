package exectask

import (
	"testing"

	"github.com/gvxrun/gvx/sentry/exectask/record"
)

func TestWaiting(t *testing.T) {
	root := t.TempDir()
	if exit, ok := waiting(root, "t1"); ok || exit != 137 {
		t.Errorf("deleted before start: %d, %v", exit, ok)
	}
	r := &record.Record{ID: "t1", Sandbox: "sb", Bundle: "/b"}
	if err := r.Save(root); err != nil {
		t.Fatal(err)
	}
	if exit, ok := waiting(root, "t1"); !ok || exit != 0 {
		t.Errorf("created: %d, %v", exit, ok)
	}
	r.Killed = 15
	if err := r.Save(root); err != nil {
		t.Fatal(err)
	}
	if exit, ok := waiting(root, "t1"); ok || exit != 143 {
		t.Errorf("killed with SIGTERM before start: %d, %v", exit, ok)
	}
}
