package serve

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/gvxrun/gvx/metrics"
	"github.com/gvxrun/gvx/serve/backend"
)

// endedBy is a process that exited with code, ended by failure (as the
// gvx backend's process reports a timeout or an OOM kill).
type endedBy struct {
	code    int
	failure error
}

func (p endedBy) Signal(context.Context, syscall.Signal) error { return nil }
func (p endedBy) Resize(context.Context, uint32, uint32) error { return nil }
func (p endedBy) Wait(context.Context) (int, error)            { return p.code, nil }
func (p endedBy) Failure() error                               { return p.failure }

// execsOf is a sandbox whose execs are procs, in turn.
type execsOf struct {
	backend.Sandbox
	procs []backend.Process
}

func (s *execsOf) Exec(context.Context, backend.Cmd) (backend.Process, error) {
	p := s.procs[0]
	s.procs = s.procs[1:]
	return p, nil
}

// TestExecOutcomes: an exec's outcome is counted when it ends, in the
// class of what ended it: a sandbox killed at its memory limit is an oom,
// not the ok its start was; a plain non-zero exit is ok; Wait twice counts
// once.
func TestExecOutcomes(t *testing.T) {
	m := metrics.New("serve")
	sb := measured{&execsOf{procs: []backend.Process{
		endedBy{137, errors.New("exec in sb: e1: the sandbox was killed: out of memory (it reached its memory limit)")},
		endedBy{1, nil},
		endedBy{137, metrics.WithClass(metrics.ClassTimeout, errors.New("killed after its 1s timeout"))},
	}}, m}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		p, err := sb.Exec(ctx, backend.Cmd{})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = p.Wait(ctx)
		_, _ = p.Wait(ctx)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`gvx_operations_total{component="serve",op="exec",outcome="oom"} 1`,
		`gvx_operations_total{component="serve",op="exec",outcome="ok"} 1`,
		`gvx_operations_total{component="serve",op="exec",outcome="timeout"} 1`,
		`gvx_operation_seconds_count{component="serve",op="exec"} 3`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(string(body), "op=\"exec\""))
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
