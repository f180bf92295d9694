package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
)

func TestCreateDefersWhatItDoesNotHandle(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--bundle", dir, "--pid-file", dir + "/pid", "t1"},                                // no spec there: gvx-sentry reports it
		{"--bundle", dir, "--console-socket", "/s.sock", "--pid-file", dir + "/pid", "t1"}, // a terminal
		{"--bundle", dir, "t1"}, // no pid file
		{"--bundle", dir, "--pid-file", dir + "/pid", "t1", "t2"},
	} {
		c := command{globals: []string{"gvx-sentry"}, root: t.TempDir(), sub: "create", args: args, sentry: "/nonexistent/gvx-sentry"}
		if handled, err := fast[c.sub](c); handled || err != nil {
			t.Errorf("create %q: handled %v, err %v; want it left to gvx-sentry", args, handled, err)
		}
	}
}

// TestCreateInRunningSandbox: the create of a container that joins a
// running sandbox starts gvx-sentry once, as its monitor-to-be
// (monitor.SpawnCreate), and returns with its report; a root container's
// create is gvx-sentry's as before.
func TestCreateInRunningSandbox(t *testing.T) {
	dir := t.TempDir()
	sentry := filepath.Join(dir, "gvx-sentry")
	for _, tc := range []struct {
		name, script string
		annotations  map[string]string
		handled      bool
		err          string
	}{
		{"created", `echo ok >&4`, map[string]string{api.CRIContainerType: api.CRIRoleContainer}, true, ""},
		{"refused", `echo "error: creating container: no such sandbox" >&4`, map[string]string{"io.kubernetes.cri-o.ContainerType": "container"}, true, "no such sandbox"},
		{"pod's own container", `echo ok >&4`, map[string]string{api.CRIContainerType: api.CRIRoleSandbox}, false, ""},
		{"a sandbox of its own", `echo ok >&4`, nil, false, ""},
	} {
		if err := os.WriteFile(sentry, []byte("#!/bin/sh\n"+tc.script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		bundle := t.TempDir()
		spec, _ := json.Marshal(specs.Spec{Process: &specs.Process{Args: []string{"true"}, Cwd: "/"}, Annotations: tc.annotations})
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), spec, 0o600); err != nil {
			t.Fatal(err)
		}
		root := t.TempDir()
		c := command{globals: []string{"gvx-runtime"}, root: root, sub: "create", sentry: sentry,
			args: []string{"--bundle", bundle, "--pid-file", filepath.Join(bundle, "pid"), "c1"}}
		handled, err := c.create()
		if handled != tc.handled || (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: handled %v, %v; want %v, %q", tc.name, handled, err, tc.handled, tc.err)
		}
		if _, err := os.Lstat(api.SentryRoot(root).MonitorSocket("c1")); (err == nil) != (tc.handled && tc.err == "") {
			t.Errorf("%s: start socket: %v", tc.name, err)
		}
	}
}
