package taskio

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestFIFODir(t *testing.T) {
	roots := []string{"/state/fifo", DefaultRoot}
	for f, want := range map[string]string{
		"/state/fifo/123/ab-stdout":            "/state/fifo/123",
		"/run/containerd/fifo/9/ab-stderr":     "/run/containerd/fifo/9",
		"/state/fifo/123/other-stdout":         "", // not the task's
		"/state/fifo/ab-stdout":                "", // not in a directory of its own
		"/state/fifo/1/2/ab-stdout":            "", // too deep
		"/elsewhere/1/ab-stdout":               "", // not under a root
		"/state/fifo/../../etc/ab-stdout":      "", // not clean
		"binary:///usr/bin/logger?x=ab-stdout": "",
		"":                                     "",
	} {
		if got := fifoDir(f, "ab", roots); got != want {
			t.Errorf("fifoDir(%q) = %q, want %q", f, got, want)
		}
	}
}

func TestRemove(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "123")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"ab-stdout", "ab-stderr"} {
		if err := syscall.Mkfifo(filepath.Join(dir, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", dir, err)
	}
	if err := Remove(dir); err != nil {
		t.Errorf("Remove of what is gone: %v", err)
	}
	// A directory holding anything but FIFOs is not removed.
	other := filepath.Join(t.TempDir(), "456")
	os.Mkdir(other, 0o700)
	os.WriteFile(filepath.Join(other, "keep"), []byte("x"), 0o600)
	if err := Remove(other); err == nil {
		t.Error("Remove of a directory with a regular file succeeded")
	}
	if _, err := os.Stat(filepath.Join(other, "keep")); err != nil {
		t.Errorf("the regular file: %v", err)
	}
}
