package exectask

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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

func TestRewriteAndHandles(t *testing.T) {
	root := t.TempDir()
	data, _ := json.Marshal(record.Record{ID: "task1", Sandbox: "gvxpool-1", Bundle: "/b", Pid: 7})
	if err := os.WriteFile(api.SentryRoot(root).TaskRecord("task1"), data, 0o600); err != nil {
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
		{[]string{"kill", "task1", "9"}, nil},
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
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"kill", "task1", "9"}, true},
		{[]string{"kill", "--all", "task1", "KILL"}, true},
		{[]string{"delete", "--force", "task1"}, true},
		{[]string{"kill", "other", "9"}, false},
		{[]string{"delete", "other"}, false},
		{[]string{MonitorCommand, "task1"}, true},
		{[]string{"start", "task1"}, false}, // subcontainer's start talks to the monitor
	} {
		if got := Handles(command(t, root, tc.args...)); got != tc.want {
			t.Errorf("Handles(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestHandlesCreate(t *testing.T) {
	root, bundle := t.TempDir(), t.TempDir()
	write := func(annotations map[string]string) {
		t.Helper()
		data, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "process": map[string]any{"args": []string{"true"}, "cwd": "/"},
			"root": map[string]any{"path": "rootfs"}, "annotations": annotations})
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(map[string]string{api.AnnotationPoolExec: "gvxpool-1"})
	if !Handles(command(t, root, "create", "--bundle", bundle, "--pid-file", "/pid", "task2")) {
		t.Error("create of an annotated spec not handled")
	}
	write(nil)
	if Handles(command(t, root, "create", "--bundle", bundle, "task2")) {
		t.Error("create of a plain spec handled")
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
