package gvx

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/gvxrun/gvx/config"
)

func TestValidate(t *testing.T) {
	vol := filepath.Join(t.TempDir(), "v.ext4")
	if err := os.WriteFile(vol, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ok := Config{ID: "abc123", Image: "img"}
	if err := validate(ok); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for name, tc := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"id":          {func(c *Config) { c.ID = "a b" }, "ID"},
		"long id":     {func(c *Config) { c.ID = strings.Repeat("a", 65) }, "ID"},
		"image":       {func(c *Config) { c.Image = "" }, "Image"},
		"net":         {func(c *Config) { c.Network = "bridge" }, "want \"none\""},
		"nat no mode": {func(c *Config) { c.NAT = &NAT{} }, "set Network to \"nat\""},
		"nat port":    {func(c *Config) { c.Network, c.NAT = NetworkNAT, &NAT{Ports: []string{"80"}} }, "no guest port"},
		"nat rule":    {func(c *Config) { c.Network, c.NAT = NetworkNAT, &NAT{EgressAllow: []string{"a b"}} }, "egress rule"},
		"nat rate":    {func(c *Config) { c.Network, c.NAT = NetworkNAT, &NAT{Bandwidth: 10} }, "bandwidth 10"},
		"env":         {func(c *Config) { c.Env = []string{"NOEQUALS"} }, "KEY=VALUE"},
		"target":      {func(c *Config) { c.Mounts = []Mount{{Type: MountBind, Source: "/x", Target: "rel"}} }, "absolute"},
		"type":        {func(c *Config) { c.Mounts = []Mount{{Type: "nfs", Source: "/x", Target: "/x"}} }, "Type"},
		"no volume":   {func(c *Config) { c.Mounts = []Mount{{Type: MountVolume, Source: "/nonexistent.ext4", Target: "/d"}} }, "gvx volume create"},
		"bind clone":  {func(c *Config) { c.Mounts = []Mount{{Type: MountBind, Source: "/x", Target: "/x", Clone: true}} }, "Clone"},
		"publish":     {func(c *Config) { c.Publish = []Publish{{HostPath: "/tmp/x.sock", GuestPath: "/x.sock"}} }, "directory of its own"},
		"memory":      {func(c *Config) { c.Resources.MemoryBytes = 1 << 20 }, "32 MiB"},
		"negative":    {func(c *Config) { c.Resources.CPUMillis = -1 }, "negative"},
		"label":       {func(c *Config) { c.Labels = map[string]string{"dev.gvx.x": "1"} }, "gvx's own"},
		"timeout":     {func(c *Config) { c.Timeout = -1 }, "Timeout"},
		"pids":        {func(c *Config) { c.Resources.Pids = 5 }, "Pids"},
		"cpu too low": {func(c *Config) { c.Resources.CPUMillis = 1 }, "CPUMillis"},
	} {
		c := ok
		tc.edit(&c)
		err := validate(c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, tc.want)
		}
	}
	c := ok
	c.Mounts = []Mount{{Type: MountVolume, Source: vol, Target: "/data", Clone: true}}
	c.Publish = []Publish{{HostPath: "/tmp/a.sock", GuestPath: "/run/app/a.sock"}}
	if err := validate(c); err != nil {
		t.Errorf("volume and publish: %v", err)
	}
	c.Network, c.NAT = NetworkNAT, &NAT{Ports: []string{"8080:80"}, EgressDefault: "deny", EgressAllow: []string{"pypi.org:443"}, MaxConnections: 8, Bandwidth: 1 << 20}
	if err := validate(c); err != nil {
		t.Errorf("nat: %v", err)
	}
	if a := c.NAT.api(); a.MaxConnections != 8 || a.Bandwidth != 1<<20 {
		t.Errorf("the SDK's NAT limits as the annotation's: %+v", a)
	}
	if err := validate(Config{ID: "x", Image: "i", Network: "host"}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("network host: %v, want ErrUnsupported", err)
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{"abc": true, "a1b2": true, "dk8-0": true, "x.y_z": true, "": false, "-a": false, "a--b": false, "a b": false, "a/b": false} {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v", id, got)
		}
	}
	for i := 0; i < 100; i++ {
		id := randomID()
		if !ValidID(id) || strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789") != "" || len(id) != 15 {
			t.Fatalf("randomID %q is not [a-z0-9]{15}", id)
		}
	}
}

func TestSandboxFlagsAndConfig(t *testing.T) {
	base := config.Default()
	if f := sandboxFlags(base, Config{}); len(f) != 0 {
		t.Errorf("plain sandbox flags %v", f)
	}
	f := sandboxFlags(base, Config{Resources: Resources{DiskBytes: 1 << 30}, Publish: []Publish{{}}})
	if strings.Join(f, " ") != "--host-uds=create" {
		t.Errorf("flags %v", f)
	}
	// Docker mode's socket is no host socket of the guest's (unless
	// its network makes it one): a published socket still needs the flag.
	if f := sandboxFlags(base, Config{Docker: true, Publish: []Publish{{}}}); strings.Join(f, " ") != "--host-uds=create" {
		t.Errorf("docker mode with a published socket: flags %v", f)
	}
	rc := base
	rc.SentryFlags = f
	rc.Pool.Size = 3
	body, err := encodeConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	back, err := config.Parse(body)
	if err != nil || back.Pool.Size != 3 || strings.Join(back.SentryFlags, " ") != strings.Join(f, " ") || back.StateDir != base.StateDir {
		t.Errorf("config round trip: %+v, %v", back, err)
	}
}

func TestErrors(t *testing.T) {
	err := newError("exec in", "sb1", nil, errdefs.ErrNotFound)
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("%v: kind not mapped from containerd's", err)
	}
	if got := err.Error(); got != "gvx: exec in sb1: not found" {
		t.Errorf("message %q", got)
	}
	var e *Error
	if !errors.As(err, &e) || e.ID != "sb1" || e.Op != "exec in" {
		t.Errorf("As: %+v", e)
	}
	wrapped := newError("new", "x", nil, err)
	if !errors.Is(wrapped, ErrNotFound) {
		t.Error("kind lost when wrapped")
	}
	if err := newError("close", "", ErrClosed, nil); err.Error() != "gvx: close: closed" {
		t.Errorf("message %q", err)
	}
}

func TestEnvAndPaths(t *testing.T) {
	env := replaceEnv([]string{"A=1", "B=2"}, "A=3")
	env = replaceEnv(env, "C=4")
	if strings.Join(env, " ") != "A=3 B=2 C=4" {
		t.Errorf("env %v", env)
	}
	if got := clonePath("/srv/golden.ext4", "ep1"); got != "/srv/.golden-ep1.ext4" {
		t.Errorf("clone path %s", got)
	}
	s := randomSuffix()
	if len(s) != 8 || strings.Trim(s, "abcdefghijklmnopqrstuvwxyz") != "" {
		t.Errorf("suffix %q", s)
	}
}

func TestImagePoolable(t *testing.T) {
	if !imagePoolable(Config{Image: "x", Cmd: []string{"sleep", "1"}}) {
		t.Error("a plain template is not image-poolable")
	}
	for _, c := range []Config{{TTY: true}, {Docker: true}, {Hostname: "h"}, {Mounts: []Mount{{}}}, {Publish: []Publish{{}}}} {
		if imagePoolable(c) {
			t.Errorf("%+v is image-poolable", c)
		}
	}
}
