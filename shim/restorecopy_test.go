package shim

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRestoreCopy(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("TMPDIR", tmp)
	for dir, want := range map[string]bool{
		filepath.Join(tmp, "ctrd-checkpoint123"):       true,
		filepath.Join(tmp, "ctrd-checkpoint123") + "/": true,
		filepath.Join(tmp, "my-checkpoint"):            false, // a user's
		filepath.Join(tmp, "sub", "ctrd-checkpoint1"):  false, // not containerd's place
		"/var/lib/cri/c1/ctrd-checkpoint":              false, // CRI's, in a container's root
		tmp:                                            false,
	} {
		if got := restoreCopy(dir); got != want {
			t.Errorf("restoreCopy(%q) = %v, want %v", dir, got, want)
		}
	}
	xdg := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	if restoreCopy(filepath.Join(tmp, "ctrd-checkpoint9")) || !restoreCopy(filepath.Join(xdg, "ctrd-checkpoint9")) {
		t.Errorf("with XDG_RUNTIME_DIR=%s, containerd extracts there, not in %s", xdg, os.TempDir())
	}
}
