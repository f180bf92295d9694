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
// (monitor.SpawnCreate), and returns with its report — in a new mount
// namespace when it has volumes or host binds to mount, else in this
// one; a root container's create is gvx-sentry's as before.
func TestCreateInRunningSandbox(t *testing.T) {
	own, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("OWN_MNTNS", own)
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
		// Not in a mount namespace of its own without volumes or binds
		// (the stand-in compares its namespace with the test's).
		{"no mounts", `[ -z "$GVX_SENTRY_MNTNS" ] && [ "$(readlink /proc/self/ns/mnt)" = "$OWN_MNTNS" ] && echo ok >&4 || echo "error: in a new mount namespace" >&4`,
			map[string]string{api.CRIContainerType: api.CRIRoleContainer}, true, ""},
		// With volumes, in a new one and told so (volmount.InNewNamespace):
		// gvx-sentry need not re-execute itself.
		{"volumes", `[ "$GVX_SENTRY_MNTNS" = 1 ] && [ "$(readlink /proc/self/ns/mnt)" != "$OWN_MNTNS" ] && echo ok >&4 || echo "error: not in a new mount namespace" >&4`,
			map[string]string{api.CRIContainerType: api.CRIRoleContainer, api.AnnotationVolumes: `[{"image":"/v/a.ext4","staging":"/s/0"}]`}, true, ""},
	} {
		if tc.name == "volumes" && os.Geteuid() != 0 {
			t.Log("volumes: skipped (a new mount namespace needs root)")
			continue
		}
		if err := os.WriteFile(sentry, []byte("#!/bin/sh\n"+tc.script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		bundle := writeBundle(t, tc.annotations)
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

// TestMountNamespace: gvx-runtime execs gvx-sentry's create of a sandbox
// with volumes from a thread in a new mount namespace, marked in the
// environment; any other call, or a create with nothing to mount, as it
// came.
func TestMountNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a new mount namespace)")
	}
	own, err := os.Readlink("/proc/thread-self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	vols := writeBundle(t, map[string]string{api.AnnotationVolumes: `[{"image":"/v/a.ext4","staging":"/s/0"}]`})
	plain := writeBundle(t, nil)
	for _, tc := range []struct {
		name string
		argv []string
		want bool
	}{
		{"create with volumes", []string{"gvx-sentry", "--root", "/r", "create", "--bundle", vols, "--pid-file", "/p", "c1"}, true},
		{"restore with volumes", []string{"gvx-sentry", "--root", "/r", "restore", "--bundle", vols, "--image-path", "/i", "c1"}, true},
		{"create of nothing to mount", []string{"gvx-sentry", "--root", "/r", "create", "--bundle", plain, "c1"}, false},
		{"start", []string{"gvx-sentry", "--root", "/r", "start", "c1"}, false},
	} {
		type result struct {
			env []string
			ns  string
		}
		done := make(chan result, 1)
		go func() { // a thread that unshares stays locked, and ends with this
			env := mountNamespace(tc.argv, []string{"A=1"})
			ns, _ := os.Readlink("/proc/thread-self/ns/mnt")
			done <- result{env, ns}
		}()
		r := <-done
		marked := len(r.env) == 2 && r.env[1] == "GVX_SENTRY_MNTNS=1"
		if marked != tc.want || (r.ns != own) != tc.want || !tc.want && len(r.env) != 1 {
			t.Errorf("%s: env %q, namespace %s (own %s); want a new one: %v", tc.name, r.env, r.ns, own, tc.want)
		}
	}
}

// writeBundle writes a bundle whose spec runs true and has annotations.
func writeBundle(t *testing.T, annotations map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	spec, _ := json.Marshal(specs.Spec{Process: &specs.Process{Args: []string{"true"}, Cwd: "/"}, Annotations: annotations})
	if err := os.WriteFile(filepath.Join(dir, "config.json"), spec, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}
