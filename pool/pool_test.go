package pool

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/mount"

	"github.com/gvxrun/gvx/config"
)

func TestClassFollowsSandboxSettings(t *testing.T) {
	base := config.Default()
	same := config.Default()
	same.LogLevel = "info"
	same.Pool.Size = 7 // how many are kept does not change what they are
	if Class(base, "/bin/gvx-sentry") != Class(same, "/bin/gvx-sentry") {
		t.Error("equal sandbox settings gave different classes")
	}
	for name, mod := range map[string]func(*config.Config){
		"flags":     func(c *config.Config) { c.SentryFlags = []string{"--net-raw"} },
		"network":   func(c *config.Config) { c.Network = "none" },
		"userns":    func(c *config.Config) { c.UserNS.HostUID = 200000 },
		"resources": func(c *config.Config) { c.Resources.MemoryBytes = 1 << 30 },
		"overlay":   func(c *config.Config) { c.RootfsOverlay = "self" },
		"docker":    func(c *config.Config) { c.Docker.Enabled = true },
	} {
		c := config.Default()
		mod(&c)
		if Class(c, "/bin/gvx-sentry") == Class(base, "/bin/gvx-sentry") {
			t.Errorf("%s: a different sandbox setting kept the class", name)
		}
	}
	if Class(base, "/a/gvx-sentry") == Class(base, "/b/gvx-sentry") {
		t.Error("a different gvx-sentry kept the class")
	}
}

func TestBootResources(t *testing.T) {
	c := config.Default()
	c.Resources = config.Resources{MemoryBytes: 512 << 20, CPUMillis: 500}
	r := BootResources(c)
	if r.MemoryLimit != 512<<20 || r.CPUQuota != 50000 || r.CPUPeriod != 100000 {
		t.Errorf("boot resources %+v, want 512 MiB and half a CPU", r)
	}
}

// testServer is a Server whose ready sandboxes are records only (their
// pid is this process, so they count as alive).
func testServer(t *testing.T, n int) *Server {
	t.Helper()
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	cfg.Pool.Size = n
	s := &Server{cfg: cfg, class: "c1", wake: make(chan struct{}, 1)}
	for i := 0; i < n; i++ {
		dir := filepath.Join(cfg.PoolDir(), idPrefix+string(rune('a'+i)))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		s.ready = append(s.ready, &Sandbox{ID: filepath.Base(dir), Dir: dir, Pid: os.Getpid(), Class: "c1"})
	}
	return s
}

func TestClaimOverSocket(t *testing.T) {
	s := testServer(t, 2)
	sock := filepath.Join(t.TempDir(), "pool.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serveConn(context.Background(), conn)
		}
	}()
	ctx := context.Background()
	if _, err := Claim(ctx, sock, "other"); !errors.Is(err, ErrNoSandbox) {
		t.Errorf("claim of another class: %v, want ErrNoSandbox", err)
	}
	got := map[string]bool{}
	for i := 0; i < 2; i++ {
		sb, err := Claim(ctx, sock, "c1")
		if err != nil {
			t.Fatal(err)
		}
		if got[sb.ID] {
			t.Errorf("sandbox %s handed out twice", sb.ID)
		}
		got[sb.ID] = true
		if _, err := os.Stat(filepath.Join(sb.Dir, claimedFile)); err != nil {
			t.Errorf("claimed sandbox %s not marked: %v", sb.ID, err)
		}
	}
	if _, err := Claim(ctx, sock, "c1"); !errors.Is(err, ErrNoSandbox) {
		t.Errorf("claim from an empty pool: %v, want ErrNoSandbox", err)
	}
	if _, err := Claim(ctx, filepath.Join(t.TempDir(), "none.sock"), "c1"); err == nil || errors.Is(err, ErrNoSandbox) {
		t.Errorf("claim without a server: %v, want a connection error", err)
	}
}

func TestClaimSkipsDeadSandboxes(t *testing.T) {
	s := testServer(t, 2)
	dead, live := s.ready[0], s.ready[1]
	dead.Pid = 1 << 30 // no such process
	sb, err := s.claim("c1")
	if err != nil {
		t.Fatal(err)
	}
	if sb != live {
		t.Errorf("claimed %s, want the live %s over the dead %s", sb.ID, live.ID, dead.ID)
	}
}

func TestSandboxRecord(t *testing.T) {
	dir := t.TempDir()
	sb := &Sandbox{ID: "gvxpool-x", Dir: dir, Pid: 42, Cgroup: "/gvx-pool/gvxpool-x", Flags: "--platform=systrap",
		Image: "gvx.test/busybox:latest", Layers: []string{"/l/2/fs", "/l/1/fs"}}
	p := filepath.Join(dir, stateFile)
	if err := sb.Save(p); err != nil {
		t.Fatal(err)
	}
	got, err := LoadSandbox(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sb) {
		t.Errorf("loaded %+v, want %+v", got, sb)
	}
	if err := os.WriteFile(p, []byte(`{"id":""}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSandbox(p); err == nil {
		t.Error("a record without id loaded")
	}
}

func TestNewServerErrors(t *testing.T) {
	dir := t.TempDir()
	sentry := filepath.Join(dir, "gvx-sentry")
	for _, f := range []string{sentry, filepath.Join(dir, "gvx-hook")} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Default()
	if _, err := NewServer(cfg, sentry); err == nil || !strings.Contains(err.Error(), "[pool] size") {
		t.Errorf("pool size 0: %v, want an error naming [pool] size", err)
	}
	cfg.Pool.Size = 2
	if _, err := NewServer(cfg, sentry); err == nil || !strings.Contains(err.Error(), "gvx-pause") || !strings.Contains(err.Error(), "make install") {
		t.Errorf("no gvx-pause: %v, want an error naming it and the fix", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gvx-pause"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if s, err := NewServer(cfg, sentry); err != nil || s.Class() != Class(cfg, sentry) {
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

func TestLayers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mounts []mount.Mount
		want   []string
	}{
		{"container on three layers", []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{
			"index=off", "workdir=/s/9/work", "upperdir=/s/9/fs", "lowerdir=/s/3/fs:/s/2/fs:/s/1/fs"}}}, []string{"/s/3/fs", "/s/2/fs", "/s/1/fs"}},
		{"view of three layers", []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{
			"lowerdir=/s/3/fs:/s/2/fs:/s/1/fs"}}}, []string{"/s/3/fs", "/s/2/fs", "/s/1/fs"}},
		{"lowerdir+ options", []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{
			"lowerdir+=/s/2/fs", "lowerdir+=/s/1/fs", "upperdir=/s/9/fs"}}}, []string{"/s/2/fs", "/s/1/fs"}},
		{"view of one layer", []mount.Mount{{Type: "bind", Source: "/s/1/fs", Options: []string{"ro", "rbind"}}}, []string{"/s/1/fs"}},
		{"writable bind", []mount.Mount{{Type: "bind", Source: "/s/1/fs", Options: []string{"rw", "rbind"}}}, nil},
		{"ext4 image", []mount.Mount{{Type: "ext4", Source: "/s/1/rootfs.img"}}, nil},
		{"two mounts", []mount.Mount{{Type: "bind", Source: "/a", Options: []string{"ro"}}, {Type: "bind", Source: "/b", Options: []string{"ro"}}}, nil},
	} {
		if got := Layers(tc.mounts); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Layers = %q, want %q", tc.name, got, tc.want)
		}
	}
}
