package cgroups

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadUsage reads a v1 and a v2 cgroup laid out in a directory.
func TestReadUsage(t *testing.T) {
	write := func(file, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := mountRoot
	t.Cleanup(func() { mountRoot = old })

	mountRoot = t.TempDir()
	write(filepath.Join(mountRoot, "memory/gvx/a/memory.usage_in_bytes"), "4096\n")
	write(filepath.Join(mountRoot, "memory/gvx/a/memory.limit_in_bytes"), "9223372036854771712\n")
	write(filepath.Join(mountRoot, "memory/gvx/a/memory.stat"), "cache 1024\nrss 2048\n")
	write(filepath.Join(mountRoot, "cpuacct/gvx/a/cpuacct.usage"), "123456789\n")
	write(filepath.Join(mountRoot, "pids/gvx/a/pids.current"), "7\n")
	u, err := ReadUsage("gvx/a")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Usage{CPUNanos: 123456789, MemoryBytes: 4096, MemoryCache: 1024, Pids: 7}); u != want {
		t.Fatalf("v1: got %+v, want %+v", u, want)
	}
	if m, err := ReadMemory("gvx/a"); err != nil || m != 4096 {
		t.Fatalf("v1 memory: %d, %v", m, err)
	}

	mountRoot = t.TempDir()
	write(filepath.Join(mountRoot, "gvx/b/memory.current"), "8192\n")
	write(filepath.Join(mountRoot, "gvx/b/memory.max"), "65536\n")
	write(filepath.Join(mountRoot, "gvx/b/memory.stat"), "anon 100\nfile 512\n")
	write(filepath.Join(mountRoot, "gvx/b/cpu.stat"), "usage_usec 1500\nuser_usec 1000\n")
	u, err = ReadUsage("gvx/b")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Usage{CPUNanos: 1500000, MemoryBytes: 8192, MemoryCache: 512, MemoryLimit: 65536}); u != want {
		t.Fatalf("v2: got %+v, want %+v", u, want)
	}
	if m, err := ReadMemory("gvx/b"); err != nil || m != 8192 {
		t.Fatalf("v2 memory: %d, %v", m, err)
	}

	if _, err := ReadUsage("gvx/none"); err == nil {
		t.Fatal("a missing cgroup read without error")
	}
}
