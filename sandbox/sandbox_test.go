package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/gvxrun/gvx/api"
)

func TestRecord(t *testing.T) {
	dir := t.TempDir()
	d := api.SandboxDir(filepath.Join(dir, "gvxpool-x"))
	sb := &Sandbox{ID: "gvxpool-x", Dir: string(d), Root: d.Root(), Pid: 42, Cgroup: "/gvx-pool/gvxpool-x", Flags: "--platform=systrap",
		Pool: &Pool{Class: "c1", Dir: api.PoolDir(dir), Socket: "/run/p.sock", Image: "gvx.test/busybox:latest", Layers: []string{"/l/2/fs", "/l/1/fs"}}}
	p := d.Record()
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := sb.Save(p); err != nil {
		t.Fatal(err)
	}
	got, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sb) {
		t.Errorf("loaded %+v, want %+v", got, sb)
	}
	for _, bad := range []string{`{"id":""}`, `{"id":"x","root":"rel"}`, `{`} {
		if err := os.WriteFile(p, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); err == nil {
			t.Errorf("record %s loaded", bad)
		}
	}
}

// TestDestroyLiveSandbox: a sandbox whose cgroup is unknown is deleted
// through gvx-sentry (with its root and flags), and its directory goes.
func TestDestroyLiveSandbox(t *testing.T) {
	dir := t.TempDir()
	proc := exec.Command("sleep", "60")
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	defer proc.Process.Kill()
	go proc.Wait()
	d := api.SandboxDir(filepath.Join(dir, "sb"))
	if err := os.MkdirAll(string(d.Root()), 0o700); err != nil {
		t.Fatal(err)
	}
	// A stand-in gvx-sentry: records its command line and environment,
	// and kills the "sandbox" as a forced delete would.
	calls := filepath.Join(dir, "calls")
	sentry := filepath.Join(dir, api.SentryBinary)
	script := "#!/bin/sh\necho \"$@ $" + api.FlagsEnv + "\" >> " + calls + "\nkill -9 " + strconv.Itoa(proc.Process.Pid) + "\n"
	if err := os.WriteFile(sentry, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sb := &Sandbox{ID: "sb", Dir: string(d), Root: d.Root(), Pid: proc.Process.Pid, Flags: "--network=none"}
	if err := sb.Destroy(context.Background(), sentry); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(calls)
	if want := "--root " + string(d.Root()) + " delete --force sb --network=none\n"; string(got) != want {
		t.Errorf("gvx-sentry called as %q, want %q", got, want)
	}
	if sb.Alive() {
		t.Error("sandbox process survived Destroy")
	}
	if _, err := os.Stat(string(d)); !os.IsNotExist(err) {
		t.Errorf("sandbox directory left: %v", err)
	}
	// A second Destroy of what is gone is harmless.
	if err := sb.Destroy(context.Background(), sentry); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
}

func TestReleaseRoot(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "task")
	root := api.SentryRoot(filepath.Join(parent, "default"))
	if err := os.MkdirAll(string(root), 0o700); err != nil {
		t.Fatal(err)
	}
	state := root.SandboxState("pod")
	if err := os.WriteFile(state, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ReleaseRoot(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("root with a sandbox's state released: %v", err)
	}
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	if err := ReleaseRoot(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(parent); !os.IsNotExist(err) {
		t.Errorf("empty root or its parent left: %v", err)
	}
	if err := ReleaseRoot(root); err != nil {
		t.Errorf("release of a gone root: %v", err)
	}
}
