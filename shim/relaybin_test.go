package shim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/checkpoint"
)

func TestRelayStore(t *testing.T) {
	dir := t.TempDir()
	l := api.Layout{Dir: filepath.Join(dir, "state")}
	host := filepath.Join(dir, "gvx-relay")
	if err := os.WriteFile(host, []byte("build one"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, digest, err := storeRelay(l, host)
	if err != nil {
		t.Fatal(err)
	}
	if p != l.Relay(digest) || len(digest) != 64 {
		t.Fatalf("stored at %s, digest %q", p, digest)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o555 {
		t.Fatalf("the copy: %v, %v; want mode 0555", st, err)
	}

	// A checkpoint keeps the copy; the host's relay is replaced and the
	// node's copy lost: the restore takes the image's back.
	image := filepath.Join(dir, "image")
	if err := os.Mkdir(image, 0o700); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // again into the same image: the store's copy stays whole
		if err := checkpoint.SaveRelay(image, l.Relay(digest)); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(p); string(b) != "build one" {
		t.Fatalf("the store's copy holds %q after two saves", b)
	}
	if err := os.WriteFile(host, []byte("build two"), 0o755); err != nil {
		t.Fatal(err)
	}
	p2, digest2, err := storeRelay(l, host)
	if err != nil || digest2 == digest || p2 == p {
		t.Fatalf("a new build: %s %s %v; want a copy of its own", p2, digest2, err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	got, err := restoredRelay(l, image, digest)
	if err != nil || got != p {
		t.Fatalf("restoredRelay: %q, %v; want %s", got, err, p)
	}
	if b, _ := os.ReadFile(p); string(b) != "build one" {
		t.Fatalf("the restored copy holds %q, want the saved build", b)
	}
	if b, _ := os.ReadFile(p2); string(b) != "build two" {
		t.Fatalf("the new build's copy holds %q", b)
	}

	// A damaged image and one without its copy are refused, by name.
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	saved := filepath.Join(image, checkpoint.RelayFile)
	if err := os.Chmod(saved, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(saved, []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := restoredRelay(l, image, digest); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("a damaged copy: %v", err)
	}
	if _, err := os.Stat(p); err == nil {
		t.Fatal("a damaged copy went into the store")
	}
	if err := os.Remove(saved); err != nil {
		t.Fatal(err)
	}
	if _, err := restoredRelay(l, image, digest); err == nil || !strings.Contains(err.Error(), digest) || !strings.Contains(err.Error(), "take the checkpoint again") {
		t.Fatalf("no copy: %v", err)
	}
	// A manifest naming a path instead of a digest names no host file.
	for _, bad := range []string{"../../gvx-relay", "/etc/passwd", strings.ToUpper(digest), digest[:63]} {
		if _, err := restoredRelay(l, image, bad); err == nil || !strings.Contains(err.Error(), "not a sha256") {
			t.Fatalf("relay %q in the manifest: %v", bad, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(l.RelaysDir(), ".tmp-*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
