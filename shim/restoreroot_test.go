package shim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/checkpoint"
)

// TestReadRootSpec: only a pool sandbox's gvx-pause root container is
// restored; a missing or foreign spec is refused naming the image.
func TestReadRootSpec(t *testing.T) {
	for _, tc := range []struct {
		name, spec, want string
	}{
		{"pause", `{"root":{"path":"/p"},"process":{"args":["/pause"]},"linux":{}}`, ""},
		{"missing", "", "the image is incomplete"},
		{"not json", "{", checkpoint.RootSpecFile},
		{"another program", `{"root":{"path":"/p"},"process":{"args":["/bin/sh"]},"linux":{}}`, "not a pool sandbox's gvx-pause"},
		{"no root", `{"process":{"args":["/pause"]},"linux":{}}`, "not a pool sandbox's gvx-pause"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.spec != "" {
				if err := os.WriteFile(filepath.Join(dir, checkpoint.RootSpecFile), []byte(tc.spec), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			spec, err := readRootSpec(dir)
			switch {
			case tc.want == "" && (err != nil || spec.Process.Args[0] != "/pause"):
				t.Errorf("got %+v, %v", spec, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
