package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/exectask"
	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/internal/statetest"
	"github.com/gvxrun/gvx/sentry/subcontainer"
)

// writeBundle writes a bundle whose spec has annotations.
func writeBundle(t *testing.T, annotations map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	data, err := json.Marshal(specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"true"}, Cwd: "/"}, Annotations: annotations})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, api.SpecFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// listen binds a monitor's start socket for id in root.
func listen(t *testing.T, root, id string) {
	t.Helper()
	wd, _ := os.Getwd()
	if err := os.Chdir(root); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Base(api.SentryRoot(root).MonitorSocket(id)))
	os.Chdir(wd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
}

func TestKindOf(t *testing.T) {
	root := t.TempDir()
	pod := map[string]string{api.CRIContainerType: api.CRIRoleContainer, api.CRISandboxID: "sb"}
	sub, own := writeBundle(t, pod), writeBundle(t, nil)
	task := writeBundle(t, map[string]string{api.AnnotationPoolExec: "gvxpool-1"})
	nat := writeBundle(t, map[string]string{api.AnnotationNAT: "{}"})
	if err := (&record.Record{ID: "task1", Sandbox: "gvxpool-1", Bundle: task}).Save(root); err != nil {
		t.Fatal(err)
	}
	listen(t, root, "task1")
	listen(t, root, "c1")
	statetest.Save(t, root, "c2", "sb", os.Getpid(), container.Running, &specs.Spec{Annotations: pod})
	statetest.Save(t, root, "sb", "sb", os.Getpid(), container.Running, &specs.Spec{})
	if err := os.WriteFile(api.SentryRoot(root).RestoreTarget("tg1"), []byte("/ck\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want kind
	}{
		{[]string{"create", "--bundle", sub, "--pid-file", "p", "c2"}, kindSubcontainer},
		{[]string{"create", "--bundle", own, "c3"}, kindPlain},
		{[]string{"create", "--bundle", task, "--pid-file", "/pid", "task2"}, kindTask},
		{[]string{"create", "--bundle", t.TempDir(), "c4"}, kindPlain}, // no spec: runsc says so
		{[]string{"create", "--bundle", nat, "n1"}, kindNAT},
		{[]string{"restore", "--bundle", nat, "--image-path", "/ck", "--detach", "n2"}, kindNAT},
		{[]string{"restore", "--bundle", own, "--image-path", "/ck", "c5"}, kindPlain},
		{[]string{"restore", "--bundle", sub, "--pid-file", "p", "--detach", "c6"}, kindSubcontainer},
		{[]string{"start", "c1"}, kindSubcontainer},
		{[]string{"start", "task1"}, kindTask},
		{[]string{"start", "c3"}, kindPlain},
		{[]string{"start", "tg1"}, kindTarget},
		{[]string{"delete", "tg1"}, kindPlain},
		{[]string{"kill", "task1", "9"}, kindTask},
		{[]string{"kill", "--all", "task1", "KILL"}, kindTask},
		{[]string{"kill", "c2", "KILL"}, kindPlain},
		{[]string{"kill", "other", "9"}, kindPlain},
		{[]string{"delete", "--force", "task1"}, kindTask},
		{[]string{"delete", "c2"}, kindSubcontainer},
		{[]string{"delete", "c2", "sb"}, kindPlain},
		{[]string{"delete", "sb"}, kindPlain},
		{[]string{"delete", "other"}, kindPlain},
		{[]string{"exec", "--detach", "--process", "/p.json", "--pid-file", "/pid", "task1"}, kindTask},
		{[]string{"exec", "c2", "ls"}, kindPlain},
		{[]string{"ps", "task1"}, kindTask},
		{[]string{"state", "other"}, kindPlain},
		{[]string{subcontainer.MonitorCommand, "c1"}, kindHelper},
		{[]string{exectask.MonitorCommand, "task1"}, kindHelper},
		{[]string{"boot", "--bundle", own, "sb"}, kindHelper},
		{[]string{"gofer", "--bundle", sub}, kindHelper},
		{[]string{"list"}, kindPlain},
	} {
		c, ok := argv.Parse(append([]string{"gvx-sentry", "--root", root}, tc.args...))
		if !ok {
			t.Fatalf("parse %q", tc.args)
		}
		if got := kindOf(c); got != tc.want {
			t.Errorf("kindOf(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestTable: cli.Run runs a gvx command by its name, which must be the
// subcommand of its row.
func TestTable(t *testing.T) {
	for sub, row := range table {
		for k, h := range row {
			if h.cmd != nil && h.cmd.Name() != sub {
				t.Errorf("table[%s][%v] is gvx's %q", sub, k, h.cmd.Name())
			}
			if h.rewrite != nil && k != kindTask && k != kindTarget {
				t.Errorf("table[%s][%v] rewrites its command line", sub, k)
			}
		}
	}
}

// TestTargetRestore: a restore target's start is runsc's restore, detached,
// of the image the shim named, with the same global flags.
func TestTargetRestore(t *testing.T) {
	root := t.TempDir()
	c, ok := argv.Parse([]string{"gvx-sentry", "--root", root, "--debug", "start", "tg1"})
	if !ok {
		t.Fatal("parse")
	}
	if got, ok := targetRestore(c); ok {
		t.Fatalf("no image named, got %q", got)
	}
	if err := os.WriteFile(api.SentryRoot(root).RestoreTarget("tg1"), []byte("/store/ck-1/image\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, ok := targetRestore(c)
	want := []string{"gvx-sentry", "--root", root, "--debug", "restore", "--detach", "--image-path=/store/ck-1/image", "tg1"}
	if !ok || !slices.Equal(got, want) {
		t.Fatalf("targetRestore = %q, %v; want %q", got, ok, want)
	}
	r, ok := argv.Parse(got)
	if !ok || r.SubFlag("detach") != "true" || r.SubFlag("image-path") != "/store/ck-1/image" || !slices.Equal(r.Args(), []string{"tg1"}) {
		t.Fatalf("the restore parses as %+v", r)
	}
	// A NAT sandbox's: gVisor's network "host" for the call, after the
	// task's own --network.
	c, _ = argv.Parse([]string{"gvx-sentry", "--root", root, "--network=none", "start", "tg2"})
	if err := os.WriteFile(api.SentryRoot(root).RestoreTarget("tg2"), []byte("/ck2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(api.SentryRoot(root).NATStats("tg2"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _ = targetRestore(c)
	want = []string{"gvx-sentry", "--root", root, "--network=none", "--network=host", "restore", "--detach", "--image-path=/ck2", "tg2"}
	if !slices.Equal(got, want) {
		t.Fatalf("a NAT target's restore = %q, want %q", got, want)
	}
	if r, ok := argv.Parse(got); !ok || r.Sub != "restore" {
		t.Fatalf("the NAT target's restore parses as %+v", r)
	}
}
