package pool

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/pool/bootspec"
	"github.com/gvxrun/gvx/pool/client"
)

// testServer is a Server whose ready sandboxes are records only (their
// pid is this process, so they count as alive).
func testServer(t *testing.T, n int) *Server {
	t.Helper()
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	cfg.Pool.Size = n
	s := &Server{cfg: cfg, class: "c1", wake: make(chan struct{}, 1)}
	for i := 0; i < n; i++ {
		sb := s.newSandbox(api.PoolSandboxPrefix + string(rune('a'+i)))
		if err := os.MkdirAll(sb.Dir, 0o700); err != nil {
			t.Fatal(err)
		}
		sb.Pid = os.Getpid()
		s.ready = append(s.ready, sb)
	}
	return s
}

// serve answers s's protocol on a socket of the test's, until it ends.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "pool.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serveConn(context.Background(), conn)
		}
	}()
	return sock
}

func TestClaimOverSocket(t *testing.T) {
	s := testServer(t, 2)
	sock := serve(t, s)
	ctx := context.Background()
	if _, err := client.Claim(ctx, sock, "other", "t"); !errors.Is(err, client.ErrNoSandbox) {
		t.Errorf("claim of another class: %v, want ErrNoSandbox", err)
	}
	got := map[string]bool{}
	for i := 0; i < 2; i++ {
		sb, err := client.Claim(ctx, sock, "c1", "t")
		if err != nil {
			t.Fatal(err)
		}
		if got[sb.ID] {
			t.Errorf("sandbox %s handed out twice", sb.ID)
		}
		got[sb.ID] = true
		if _, err := os.Stat(api.SandboxDir(sb.Dir).Claimed()); err != nil {
			t.Errorf("claimed sandbox %s not marked: %v", sb.ID, err)
		}
	}
	if _, err := client.Claim(ctx, sock, "c1", "t"); !errors.Is(err, client.ErrNoSandbox) {
		t.Errorf("claim from an empty pool: %v, want ErrNoSandbox", err)
	}
	if _, err := client.Claim(ctx, filepath.Join(t.TempDir(), "none.sock"), "c1", "t"); err == nil || errors.Is(err, client.ErrNoSandbox) {
		t.Errorf("claim without a server: %v, want a connection error", err)
	}
}

func TestClaimSkipsDeadSandboxes(t *testing.T) {
	s := testServer(t, 2)
	live, dead := s.ready[0], s.ready[1]
	dead.Pid = 1 << 30 // no such process
	sb, err := s.claim("c1", "t")
	if err != nil {
		t.Fatal(err)
	}
	if sb != live {
		t.Errorf("claimed %s, want the live %s over the dead %s", sb.ID, live.ID, dead.ID)
	}
}

func TestNewServerErrors(t *testing.T) {
	dir := t.TempDir()
	sentry := filepath.Join(dir, api.SentryBinary)
	for _, f := range []string{sentry, filepath.Join(dir, api.HookBinary)} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Default()
	if _, err := NewServer(cfg, sentry); err == nil || !strings.Contains(err.Error(), "[pool] size") {
		t.Errorf("pool size 0: %v, want an error naming [pool] size", err)
	}
	cfg.Pool.Size = 2
	if _, err := NewServer(cfg, sentry); err == nil || !strings.Contains(err.Error(), api.PauseBinary) || !strings.Contains(err.Error(), "make install") {
		t.Errorf("no gvx-pause: %v, want an error naming it and the fix", err)
	}
	if err := os.WriteFile(filepath.Join(dir, api.PauseBinary), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if s, err := NewServer(cfg, sentry); err != nil || s.Class() != bootspec.Class(cfg, sentry) {
		t.Errorf("NewServer: %v", err)
	}
	// An image pool needs an image opener (gvx pool serve sets one).
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Pool.Image = "gvx.test/busybox:latest"
	s, err := NewServer(cfg, sentry)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(context.Background()); err == nil || !strings.Contains(err.Error(), "pool.image") {
		t.Errorf("image pool without an opener: %v, want an error naming pool.image", err)
	}
	s.OpenImage = func(context.Context, string, string) (Image, error) { return nil, errors.New("no such image") }
	if err := s.Serve(context.Background()); err == nil || !strings.Contains(err.Error(), "no such image") {
		t.Errorf("image pool whose image does not open: %v", err)
	}
}

// TestLeaseRefusals: a lease from a pool without pool.lease is refused
// naming the setting, and a task's claim from a lease pool is refused
// (the task boots its own sandbox), handing out nothing either way.
func TestLeaseRefusals(t *testing.T) {
	for _, lease := range []bool{false, true} {
		s := testServer(t, 1)
		s.cfg.Pool.Lease = lease
		sock := serve(t, s)
		ctx := context.Background()
		if lease {
			if _, err := client.Claim(ctx, sock, "c1", "t"); !errors.Is(err, client.ErrNoSandbox) || !strings.Contains(err.Error(), "serves leases only") {
				t.Errorf("a task's claim from a lease pool: %v, want ErrNoSandbox naming leases", err)
			}
		} else if _, err := client.ClaimLease(ctx, sock, "l"); err == nil || !strings.Contains(err.Error(), "lease = true") {
			t.Errorf("a lease from a pool without pool.lease: %v, want an error naming the setting", err)
		}
		if len(s.ready) != 1 || s.claimed != 0 {
			t.Errorf("lease=%t: %d ready, %d claimed after the refusal, want 1 and 0", lease, len(s.ready), s.claimed)
		}
	}
}
