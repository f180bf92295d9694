package embedded

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeContainerd writes a stand-in for containerd (a file named
// containerd, as Config.Binary allows): it listens on the config's grpc
// address until SIGTERM, as containerd does.
func fakeContainerd(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "containerd")
	script := `#!/usr/bin/env python3
import re, signal, socket, sys
cfg = open(sys.argv[sys.argv.index("--config") + 1]).read()
addr = re.search(r'\[grpc\]\s+address = "([^"]+)"', cfg).group(1)
s = socket.socket(socket.AF_UNIX)
s.bind(addr)
s.listen(16)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
while True:
    c, _ = s.accept()
    c.close()
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

func testConfig(t *testing.T) Config {
	dir, err := os.MkdirTemp("", "emb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return Config{StateDir: filepath.Join(dir, "s"), DataDir: filepath.Join(dir, "d"), Binary: fakeContainerd(t), Path: os.Getenv("PATH")}
}

func pidOf(t *testing.T, cfg Config) int {
	t.Helper()
	b, err := os.ReadFile(cfg.pidFile())
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func idle(ok bool) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) { return ok, nil }
}

func TestStartShareStop(t *testing.T) {
	cfg := testConfig(t)
	ctx := context.Background()
	a, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Started() || !listening(a.Address()) {
		t.Fatal("the first client did not start the daemon")
	}
	pid := pidOf(t, cfg)
	b, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if b.Started() || pidOf(t, cfg) != pid {
		t.Error("the second client started another daemon")
	}
	// Not the last client: it stays, even though idle.
	if err := a.Close(ctx, idle(true)); err != nil {
		t.Fatal(err)
	}
	if !alive(pid) {
		t.Fatal("stopped while another client used it")
	}
	// The last client, but containers are left: it stays.
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx, idle(true)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx, idle(false)); err != nil {
		t.Fatal(err)
	}
	if !alive(pid) {
		t.Fatal("stopped although not idle")
	}
	// Found running by a new client, which closes it idle: stopped.
	d, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d.Started() {
		t.Error("a running daemon was started again")
	}
	if err := d.Close(ctx, idle(true)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the last idle client did not stop it")
		}
	}
	if listening(cfg.Address()) {
		t.Error("its socket still answers")
	}
	// And it starts again afterwards.
	e, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Started() {
		t.Error("not restarted")
	}
	_ = e.Close(ctx, idle(true))
}

func TestStartFailure(t *testing.T) {
	cfg := testConfig(t)
	bad := filepath.Join(t.TempDir(), "containerd")
	if err := os.WriteFile(bad, []byte("#!/bin/sh\necho broken config >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.Binary = bad
	_, err := Start(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "exited at start") || !strings.Contains(err.Error(), "broken config") {
		t.Errorf("start of a failing daemon: %v; want its exit and the log's end", err)
	}
	cfg.StateDir = "/" + strings.Repeat("x", 120)
	if _, err := Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("long socket path: %v", err)
	}
}
