package compat

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gvxrun/gvx/api"
)

// TestBootPidsLimit: the guest's pids limit is read from the boot's spec
// file descriptor without moving its offset (gVisor reads it next).
func TestBootPidsLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	body := fmt.Sprintf(`{"ociVersion":"1.0.2","annotations":{%q:"64"}}`, api.AnnotationPidsLimit)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := fmt.Sprint(f.Fd())
	for _, args := range [][]string{{"gvx-sentry", "boot", "--spec-fd=" + fd, "id"}, {"gvx-sentry", "boot", "-spec-fd", fd, "id"}} {
		if n := BootPidsLimit(args); n != 64 {
			t.Errorf("BootPidsLimit(%q) = %d, want 64", args, n)
		}
	}
	if off, _ := f.Seek(0, 1); off != 0 {
		t.Errorf("the spec's offset moved to %d", off)
	}
	if n := BootPidsLimit([]string{"gvx-sentry", "boot", "id"}); n != 0 {
		t.Errorf("no spec fd: %d", n)
	}
}
