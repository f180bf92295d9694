package api_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
)

// TestUnixAddr: a long socket path is bound through its directory's
// descriptor and reached again at its own path.
func TestUnixAddr(t *testing.T) {
	if addr, release, err := api.UnixAddr("/run/x.sock"); err != nil || addr != "/run/x.sock" {
		t.Errorf("short path: %q, %v", addr, err)
	} else {
		release()
	}
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "s.sock")
	addr, release, err := api.UnixAddr(path)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", addr)
	release()
	if err != nil {
		t.Fatalf("listen on %s (for %s): %v", addr, path, err)
	}
	defer ln.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("the socket is not at %s: %v", path, err)
	}
	addr, release, err = api.UnixAddr(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", addr)
	release()
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	c.Close()
}
