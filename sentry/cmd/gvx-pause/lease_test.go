package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadMounts: mountinfo lines (gVisor's, with optional fields and an
// escaped space) give each mount's point, per-mount flags, type and
// filesystem options; a malformed line is an error naming the file.
func TestReadMounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mountinfo")
	body := "1 0 0:1 / / rw,relatime - overlay none rw\n" +
		"2 1 0:2 / /dev rw,nosuid shared:1 - dev none rw,mode=0755\n" +
		"3 1 0:3 / /run/a\\040b rw,nosuid,noexec - tmpfs none rw,size=65536k,mode=755\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	ms, err := readMounts(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []mountEntry{
		{point: "/", flags: "rw,relatime", fstype: "overlay", super: "rw"},
		{point: "/dev", flags: "rw,nosuid", fstype: "dev", super: "rw,mode=0755"},
		{point: "/run/a b", flags: "rw,nosuid,noexec", fstype: "tmpfs", super: "rw,size=65536k,mode=755"},
	}
	if len(ms) != len(want) {
		t.Fatalf("got %+v, want %+v", ms, want)
	}
	for i := range want {
		if ms[i] != want[i] {
			t.Errorf("mount %d: %+v, want %+v", i, ms[i], want[i])
		}
	}
	if err := os.WriteFile(path, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readMounts(path); err == nil {
		t.Error("a malformed line: no error")
	}
}

// TestUnescape: mountinfo's octal escapes, and a trailing backslash left
// as it is.
func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/x\011y\134z`: "/x\ty\\z", `/plain`: "/plain", `/end\`: `/end\`, `/short\04`: `/short\04`} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWriteInto: a file replaces a symlink of the same name (which is not
// followed), a missing parent is made, "../" cannot leave the root, and
// an empty name is an error.
func TestWriteInto(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "target")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "etc", "resolv.conf")); err != nil {
		t.Fatal(err)
	}
	dir, err := os.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if err := writeInto(dir, map[string]string{"etc/resolv.conf": "nameserver 10.0.2.3\n", "../../new/file": "x"}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(root, "etc", "resolv.conf")); err != nil || string(got) != "nameserver 10.0.2.3\n" {
		t.Errorf("etc/resolv.conf: %q, %v", got, err)
	}
	if fi, err := os.Lstat(filepath.Join(root, "etc", "resolv.conf")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("etc/resolv.conf is not a regular file: %v, %v", fi, err)
	}
	if _, err := os.Stat(outside); err == nil {
		t.Error("the symlink's target was written")
	}
	if got, err := os.ReadFile(filepath.Join(root, "new", "file")); err != nil || string(got) != "x" {
		t.Errorf("new/file (from ../../new/file): %q, %v", got, err)
	}
	if err := writeInto(dir, map[string]string{"/": "x"}); err == nil {
		t.Error("an empty name: no error")
	}
}
