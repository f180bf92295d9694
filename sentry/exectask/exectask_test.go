package exectask

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/exectask/record"
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
