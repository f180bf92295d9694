package subcontainer

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/argv"
)

func writeSpec(t *testing.T, dir string, annotations map[string]string) {
	t.Helper()
	data, err := json.Marshal(specs.Spec{Version: specs.Version, Annotations: annotations})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestHandles(t *testing.T) {
	root, sub, own := t.TempDir(), t.TempDir(), t.TempDir()
	writeSpec(t, sub, map[string]string{api.CRIContainerType: api.CRIRoleContainer, api.CRISandboxID: "sb"})
	writeSpec(t, own, nil)
	// A monitor's start socket for c1.
	wd, _ := os.Getwd()
	if err := os.Chdir(root); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Base(api.SentryRoot(root).MonitorSocket("c1")))
	os.Chdir(wd)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		argv []string
		want bool
	}{
		{[]string{"gvx-sentry", "--root", root, "create", "--bundle", sub, "--pid-file", "p", "c2"}, true},
		{[]string{"gvx-sentry", "--root", root, "create", "--bundle", own, "c3"}, false},
		{[]string{"gvx-sentry", "--root", root, "start", "c1"}, true},
		{[]string{"gvx-sentry", "--root", root, "start", "c3"}, false},
		{[]string{"gvx-sentry", "--root", root, MonitorCommand, "c1"}, true},
		{[]string{"gvx-sentry", "--root", root, "kill", "c1", "KILL"}, false},
		{[]string{"gvx-sentry", "--root", root, "gofer", "--bundle", sub}, false},
		{[]string{"gvx-sentry", "--no-such-flag", "create"}, false},
	} {
		c, ok := argv.Parse(tc.argv)
		if got := ok && Handles(c); got != tc.want {
			t.Errorf("Handles(%q) = %v, want %v", tc.argv, got, tc.want)
		}
	}
}
