package launcher

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/sentry/internal/contractroot"
)

// TestContract: the task's flags file the shim writes beside the task's
// link to gvx-sentry, and the environment variable that overrides it, are
// contract.json's.
func TestContract(t *testing.T) {
	c := contractroot.Load(t)
	t.Setenv(c.Name("flags_env"), "")
	dir := t.TempDir()
	link := filepath.Join(dir, c.Name("sentry_binary"))
	if err := os.WriteFile(filepath.Join(dir, c.Name("flags_file")), []byte("--network=none"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := Flags(link); err != nil || got != "--network=none" {
		t.Errorf("flags file %s: Flags = %q, %v", c.Name("flags_file"), got, err)
	}
	t.Setenv(c.Name("flags_env"), "--debug")
	if got, err := Flags(link); err != nil || got != "--debug" {
		t.Errorf("%s: Flags = %q, %v", c.Name("flags_env"), got, err)
	}
	if _, err := Args([]string{"gvx-sentry"}, "boot"); err == nil || !strings.Contains(err.Error(), c.Name("flags_env")) {
		t.Errorf("a bad flag: %v, want an error naming %s", err, c.Name("flags_env"))
	}
}
