package shim

import (
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
)

// TestMountsPrivately: a create goes through gvx-runtime for a private
// mount namespace when the spec has bind mounts from absolute paths
// (volumes' staging points, host binds), not for the default mounts.
func TestMountsPrivately(t *testing.T) {
	defaults := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "ro"}},
	}
	for _, tc := range []struct {
		name  string
		extra []specs.Mount
		want  bool
	}{
		{"defaults", nil, false},
		{"bind", []specs.Mount{{Destination: "/etc/hosts", Type: "bind", Source: "/var/lib/hosts", Options: []string{"rbind", "ro"}}}, true},
		{"none with rbind", []specs.Mount{{Destination: "/data", Type: "none", Source: "/srv/data", Options: []string{"rbind", "rw"}}}, true},
		{"relative source", []specs.Mount{{Destination: "/data", Type: "bind", Source: "data", Options: []string{"bind"}}}, false},
		{"volumes", nil, true}, // an ext4lite root filesystem: no mount of its own
	} {
		s := &specs.Spec{Mounts: append(append([]specs.Mount(nil), defaults...), tc.extra...)}
		if tc.name == "volumes" {
			s.Annotations = map[string]string{api.AnnotationVolumes: `[{"image":"/v/root.ext4","staging":"/s/root"}]`}
		}
		if got := mountsPrivately(s); got != tc.want {
			t.Errorf("%s: mountsPrivately = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSentryLink: after a create through gvx-runtime the link points at
// gvx-sentry again, and the flags file beside it stays.
func TestSentryLink(t *testing.T) {
	bin := t.TempDir()
	sentry := filepath.Join(bin, "gvx-sentry")
	front := filepath.Join(bin, "gvx-runtime")
	for _, p := range []string{sentry, front} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "task")
	link, err := taskSentry(dir, sentry, "--debug", true)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.Readlink(link); got != front {
		t.Fatalf("link → %s, want gvx-runtime %s", got, front)
	}
	if err := sentryLink(link, sentry); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.Readlink(link); got != sentry {
		t.Errorf("link → %s, want gvx-sentry %s", got, sentry)
	}
	if _, err := os.Lstat(link + ".new"); !os.IsNotExist(err) {
		t.Errorf("%s.new left: %v", link, err)
	}
}
