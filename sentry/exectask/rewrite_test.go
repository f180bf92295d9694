package exectask

import (
	"reflect"
	"testing"

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
