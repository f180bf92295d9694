package janitor

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestShimSockets: a shim socket nothing listens on goes once it is a
// minute old; a listening one, a young one and a file that is no socket
// stay; a dry run removes nothing.
func TestShimSockets(t *testing.T) {
	dir := t.TempDir()
	age := func(p string, d time.Duration) {
		t.Helper()
		at := time.Now().Add(-d)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	// A socket whose listener is gone, the file left (as a killed shim leaves it).
	deadSocket := func(name string) string {
		p := filepath.Join(dir, name)
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		ln.Close()
		return p
	}
	stale := deadSocket("stale")
	age(stale, 2*shimSocketAge)
	young := deadSocket("young")
	live := filepath.Join(dir, "live")
	ln, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	age(live, 2*shimSocketAge)
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	age(plain, 2*shimSocketAge)
	for _, dry := range []bool{true, false} {
		s := &sweep{o: Options{ShimSocketDirs: []string{dir, filepath.Join(dir, "missing")}, DryRun: dry}, r: &Report{DryRun: dry}, now: time.Now()}
		s.shimSockets(context.Background())
		if len(s.r.Items) != 1 || s.r.Items[0].What != stale || s.r.Items[0].Kind != KindShimSocket {
			t.Fatalf("dry run %v: %+v, want the stale socket alone", dry, s.r.Items)
		}
		_, err := os.Lstat(stale)
		if dry != (err == nil) {
			t.Errorf("dry run %v: the stale socket: %v", dry, err)
		}
	}
	for _, p := range []string{young, live, plain} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	if !listening(live) || listening(young) {
		t.Errorf("listening: live %v, young %v; want true, false", listening(live), listening(young))
	}
}
