package fastexec

import (
	"strings"
	"testing"

	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/sentry/monitor"
)

// TestServerAnswersWithoutTheSandbox: the requests a server answers
// without calling the sandbox — its owner; a signal to a task's whole
// container (pid 0 or all) refused unless the container is the task's own
// (Whole), so that a task started as a process in a sandbox's root
// container cannot signal the sandbox's init or every process; an unknown
// request and an exec without its stdio refused.
func TestServerAnswersWithoutTheSandbox(t *testing.T) {
	x := &Server{Container: &container.Container{ID: "sb"}, UID: 100000, GID: 100001}
	if r := x.answer(monitor.Request{Op: monitor.OpOwner}, nil); r.Error != "" || r.UID != 100000 || r.GID != 100001 {
		t.Errorf("owner: %+v", r)
	}
	for _, req := range []monitor.Request{
		{Op: monitor.OpSignal, Signal: 9},
		{Op: monitor.OpSignal, Signal: 9, Pid: 7, All: true},
	} {
		if r := x.answer(req, nil); !strings.Contains(r.Error, "want a process of the task") {
			t.Errorf("%+v to a process task's server: %+v, want a refusal", req, r)
		}
	}
	if r := x.answer(monitor.Request{Op: "start"}, nil); !strings.Contains(r.Error, "unknown request") {
		t.Errorf("unknown request: %+v", r)
	}
	if r := x.answer(monitor.Request{Op: monitor.OpExec}, nil); !strings.Contains(r.Error, "three stdio") {
		t.Errorf("exec without stdio: %+v", r)
	}
}
