package main

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/gvxrun/gvx/sentry/argv"
)

// TestDropGoneLog: a --log whose directory is gone (a removed bundle) is
// dropped, in both spellings; one whose directory exists is kept, and so
// is everything else.
func TestDropGoneLog(t *testing.T) {
	dir := t.TempDir()
	gone := filepath.Join(dir, "bundle-removed", "log.json")
	here := filepath.Join(dir, "log.json")
	for _, tc := range []struct{ in, want []string }{
		{[]string{"gvx-sentry", "--root", "/r", "--log", gone, "--log-format", "json", "exec", "id"}, []string{"gvx-sentry", "--root", "/r", "--log-format", "json", "exec", "id"}},
		{[]string{"gvx-sentry", "--log=" + gone, "delete", "id"}, []string{"gvx-sentry", "delete", "id"}},
		{[]string{"gvx-sentry", "-log", gone, "state", "id"}, []string{"gvx-sentry", "state", "id"}},
		{[]string{"gvx-sentry", "--log", here, "delete", "id"}, []string{"gvx-sentry", "--log", here, "delete", "id"}},
		{[]string{"gvx-sentry", "--log-format", "json", "delete", "id"}, []string{"gvx-sentry", "--log-format", "json", "delete", "id"}},
		// After the subcommand a --log is the subcommand's business.
		{[]string{"gvx-sentry", "exec", "--log", gone, "id"}, []string{"gvx-sentry", "exec", "--log", gone, "id"}},
	} {
		c, ok := argv.Parse(tc.in)
		if !ok {
			t.Fatalf("%q does not parse", tc.in)
		}
		if got := dropGoneLog(slices.Clone(tc.in), c); !slices.Equal(got, tc.want) {
			t.Errorf("dropGoneLog(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
