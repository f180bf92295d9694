package janitor

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
)

// TestRelays: copies of gvx-relay no sandbox was given for an hour go,
// as do a dead shim's unfinished copies; recent ones stay; a dry run
// removes nothing.
func TestRelays(t *testing.T) {
	l := api.Layout{Dir: t.TempDir()}
	if err := os.MkdirAll(l.RelaysDir(), 0o711); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, age time.Duration) string {
		t.Helper()
		p := filepath.Join(l.RelaysDir(), name)
		if err := os.WriteFile(p, []byte(name), 0o555); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := mk("aaaa", 2*relayIdle)
	mk("bbbb", relayIdle/2)
	tmp := mk(".tmp-1", 2*relayTmpAge)
	mk(".tmp-2", 0)
	for _, dry := range []bool{true, false} {
		s := &sweep{o: Options{Layout: l, DryRun: dry}, r: &Report{DryRun: dry}, now: time.Now()}
		s.relays(context.Background())
		var got []string
		for _, it := range s.r.Items {
			if it.Kind != KindRelay || it.Err != nil {
				t.Fatalf("dry run %v: %+v", dry, it)
			}
			got = append(got, it.What)
		}
		sort.Strings(got)
		if want := []string{tmp, stale}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("dry run %v: reclaimed %v, want %v", dry, got, want)
		}
		_, err := os.Stat(stale)
		if dry != (err == nil) {
			t.Fatalf("dry run %v: %s: %v", dry, stale, err)
		}
	}
	left, _ := os.ReadDir(l.RelaysDir())
	if len(left) != 2 {
		t.Fatalf("left %v, want the recent copy and the recent unfinished one", left)
	}
}

// TestMountedRelays: a relay copy some mount namespace mounts is found by
// its mount's root; other mounts are not.
func TestMountedRelays(t *testing.T) {
	proc := t.TempDir()
	info := "132 131 254:0 /run/gvx/relay/c7d1 /dev/gvx-relay ro,nosuid,relatime,idmapped - ext4 /dev/vda rw\n" +
		"49 27 0:40 / /run/gvx/rootfs/ns/dkrelayup rw,relatime - overlay overlay rw\n" +
		"50 27 0:41 /relay/e5f6 /dev/gvx-relay ro - tmpfs tmpfs rw\n"
	if err := os.MkdirAll(filepath.Join(proc, "42"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "42", "mountinfo"), []byte(info), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(proc, "42", "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("mnt:[4026531841]", filepath.Join(proc, "42", "ns", "mnt")); err != nil {
		t.Fatal(err)
	}
	got := mountedRelays(proc)
	if len(got) != 2 || !got["c7d1"] || !got["e5f6"] {
		t.Fatalf("mounted relays %v, want c7d1 and e5f6", got)
	}
}
