package maskpaths

import (
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestRewrite(t *testing.T) {
	root, vol := t.TempDir(), t.TempDir()
	for _, d := range []string{"etc", "var/lib", "data"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"etc/passwd", "etc/shadow"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(vol, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	// An image's absolute link must resolve inside the root, not on the host.
	if err := os.Symlink("/etc/shadow", filepath.Join(root, "etc", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../etc", filepath.Join(root, "var", "lib", "up")); err != nil {
		t.Fatal(err)
	}
	s := &specs.Spec{
		Root:   &specs.Root{Path: root},
		Mounts: []specs.Mount{{Destination: "/data", Type: "bind", Source: vol, Options: []string{"rbind"}}, {Destination: "/proc", Type: "proc"}},
		Linux: &specs.Linux{
			MaskedPaths:   []string{"/etc/passwd", "/var", "/etc/link", "/proc/kcore", "/nonexistent", "/data/sub"},
			ReadonlyPaths: []string{"/var/lib/up", "/proc/sys", "/data"},
		},
	}
	changed, err := Rewrite(s, "/empty")
	if err != nil || !changed {
		t.Fatalf("Rewrite: %v %v", changed, err)
	}
	got := map[string]specs.Mount{}
	for _, m := range s.Mounts[2:] {
		got[m.Destination] = m
	}
	want := map[string]string{ // destination → type source
		"/etc/passwd": "bind /empty",
		"/var":        "tmpfs tmpfs",
		"/etc/link":   "bind /empty",
		"/data/sub":   "tmpfs tmpfs",
		"/var/lib/up": "bind " + filepath.Join(root, "etc"),
		"/data":       "bind " + vol,
	}
	if len(got) != len(want) {
		t.Errorf("mounts %+v, want %v", s.Mounts[2:], want)
	}
	for d, w := range want {
		if m, ok := got[d]; !ok || m.Type+" "+m.Source != w {
			t.Errorf("%s: %+v, want %s", d, m, w)
		}
	}
	if len(s.Linux.MaskedPaths)+len(s.Linux.ReadonlyPaths) != 0 {
		t.Errorf("lists left: %v %v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
	}
	if changed, _ := Rewrite(s, "/empty"); changed {
		t.Errorf("a second Rewrite changed the spec again")
	}
}

func TestRewriteDefaultsOnly(t *testing.T) {
	s := &specs.Spec{Root: &specs.Root{Path: t.TempDir()}, Linux: &specs.Linux{
		MaskedPaths: []string{"/proc/kcore", "/sys/firmware"}, ReadonlyPaths: []string{"/proc/sys"}}}
	if changed, err := Rewrite(s, "/empty"); changed || err != nil || len(s.Linux.MaskedPaths) != 2 || len(s.Mounts) != 0 {
		t.Errorf("containerd's defaults: changed %v, %v, spec %+v", changed, err, s.Linux)
	}
}

func TestResolveInLoop(t *testing.T) {
	root := t.TempDir()
	if err := os.Symlink("/a", filepath.Join(root, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := resolveIn(root, "/a/x"); err == nil {
		t.Errorf("a symlink loop resolved")
	}
}
