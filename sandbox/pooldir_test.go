package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
)

// RemovePoolDir leaves a pool directory whose lock a server holds (it may
// be setting it up) and removes one nobody holds; a sandbox left in it
// keeps it either way.
func TestRemovePoolDir(t *testing.T) {
	dir := api.PoolDir(filepath.Join(t.TempDir(), "pools", "abc"))
	mk := func() {
		if err := os.MkdirAll(dir.Rootfs(), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir.Rootfs(), "pause"), []byte("x"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	mk()
	server, err := os.OpenFile(dir.Lock(), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(server.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	RemovePoolDir(dir)
	if _, err := os.Stat(filepath.Join(dir.Rootfs(), "pause")); err != nil {
		t.Errorf("the directory of a server holding its lock was removed: %v", err)
	}
	server.Close() // the server is gone
	if err := os.Mkdir(filepath.Join(string(dir), api.PoolSandboxPrefix+"x"), 0o700); err != nil {
		t.Fatal(err)
	}
	RemovePoolDir(dir)
	if _, err := os.Stat(dir.Rootfs()); err != nil {
		t.Errorf("the directory of a pool with a sandbox left was removed: %v", err)
	}
	if err := os.Remove(filepath.Join(string(dir), api.PoolSandboxPrefix+"x")); err != nil {
		t.Fatal(err)
	}
	RemovePoolDir(dir)
	if _, err := os.Stat(string(dir)); !os.IsNotExist(err) {
		t.Errorf("a pool directory nobody holds, with no sandbox, is still there: %v", err)
	}
	RemovePoolDir(dir) // gone: nothing to do, nothing made
	if _, err := os.Stat(string(dir)); !os.IsNotExist(err) {
		t.Errorf("RemovePoolDir of a missing directory made it: %v", err)
	}
}
