package exectask

import (
	"errors"
	"os"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/pkg/sentry/control"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/internal/statetest"
)

func command(t *testing.T, root string, args ...string) argv.Command {
	t.Helper()
	c, ok := argv.Parse(append([]string{"gvx-sentry", "--root", root}, args...))
	if !ok {
		t.Fatalf("parse %q", args)
	}
	return c
}

func TestRewrite(t *testing.T) {
	root := t.TempDir()
	if err := (&record.Record{ID: "task1", Sandbox: "gvxpool-1", Bundle: "/b", Pid: 7}).Save(root); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want []string // nil: not rewritten
	}{
		{[]string{"exec", "--detach", "--process", "/p.json", "--pid-file", "/pid", "task1"},
			[]string{"exec", "--detach", "--process", "/p.json", "--pid-file", "/pid", "gvxpool-1"}},
		{[]string{"exec", "task1", "sh", "-c", "task1"}, []string{"exec", "gvxpool-1", "sh", "-c", "task1"}},
		{[]string{"ps", "--format", "json", "task1"}, []string{"ps", "--format", "json", "gvxpool-1"}},
		{[]string{"pause", "task1"}, []string{"pause", "gvxpool-1"}},
		{[]string{"state", "task1"}, []string{"state", "gvxpool-1"}},
		{[]string{"ps", "other"}, nil},
		{[]string{"list"}, nil},
	} {
		got, ok := Rewrite(command(t, root, tc.args...))
		if tc.want == nil {
			if ok {
				t.Errorf("%q rewritten to %q", tc.args, got)
			}
			continue
		}
		want := append([]string{"gvx-sentry", "--root", root}, tc.want...)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("Rewrite(%q) = %q, %v; want %q", tc.args, got, ok, want)
		}
	}
}

func TestNotRunning(t *testing.T) {
	root := t.TempDir()
	statetest.Save(t, root, "gone", "gone", statetest.DeadPid(t), container.Running, &specs.Spec{})
	statetest.Save(t, root, "sb", "sb", os.Getpid(), container.Running, &specs.Spec{})
	load := func(id string) *container.Container {
		c, err := container.Load(root, container.FullID{SandboxID: id, ContainerID: id}, container.LoadOpts{SkipCheck: true})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	list := func(pids ...int) func() ([]*control.Process, error) {
		return func() ([]*control.Process, error) {
			var procs []*control.Process
			for _, p := range pids {
				procs = append(procs, &control.Process{PID: kernel.ThreadID(p)})
			}
			return procs, nil
		}
	}
	failed := errors.New("signaling container")
	for _, tc := range []struct {
		name      string
		sb        string
		pid       int32
		processes func() ([]*control.Process, error)
		want      string
	}{
		{"sandbox gone", "gone", 7, list(7), api.NotRunning + ": sandbox gone is gone: signaling container"},
		{"sandbox gone, all", "gone", 0, nil, api.NotRunning + ": sandbox gone is gone: signaling container"},
		{"process exited", "sb", 7, list(1, 8), api.NotRunning + ": process 7 has exited: signaling container"},
		{"process there", "sb", 7, list(1, 7), "signaling container"},
		{"no list", "sb", 7, func() ([]*control.Process, error) { return nil, errors.New("no") }, "signaling container"},
		{"all", "sb", 0, nil, "signaling container"},
	} {
		err := notRunning(failed, load(tc.sb), tc.pid, tc.processes)
		if err.Error() != tc.want || !errors.Is(err, failed) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
}
