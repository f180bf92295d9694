package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
)

func TestParseDefaultsAndOverrides(t *testing.T) {
	c, err := Parse([]byte(`
network = "none"
sentry_flags = ["--net-raw"]
[userns]
host_uid = 200000
host_gid = 200000
size = 1000
[resources]
memory_bytes = 1073741824
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Network != "none" || c.Platform != "systrap" || c.UserNS.HostUID != 200000 || c.Resources.MemoryBytes != 1<<30 {
		t.Errorf("unexpected config %+v", c)
	}
	flags := strings.Join(c.SentryFlagList(), " ")
	if flags != "--platform=systrap --network=none --overlay2=root:memory --oci-seccomp --allow-suid --shared-root=/run/gvx/sentry-shared --control-rpc-stop-timeout=0 --net-raw" {
		t.Errorf("flags = %q", flags)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`platfrom = "systrap"`, "unknown key(s) platfrom"},
		{"[userns]\nhost_id = 5", "unknown key(s) userns.host_id"},
		{`platform = "kvm"`, `platform "kvm"`},
		{`network = "bridge"`, `network "bridge"`},
		{`log_level = "loud"`, `log_level "loud"`},
		{`state_dir = "relative"`, "must be an absolute path"},
		{`sentry = "gvx-sentry"`, "must be an absolute path"},
		{"[userns]\nhost_uid = 0", "host root"},
		{`sentry_flags = ["debug"]`, "not a single --name"},
		{`sentry_flags = ["--a --b"]`, "not a single --name"},
		{`network = `, "parse"},
		{"[pool]\nsize = -1", "pool.size -1"},
		{"[pool]\nsocket = \"pool.sock\"", "pool.socket"},
		{"[pool]\nsiz = 2", "unknown key(s) pool.siz"},
		{"[pool]\nsize = 2\nlease = true", "pool.lease needs pool.image"},
		{"[nat.egress]\ndefualt = \"deny\"", "unknown key(s) nat.egress.defualt"},
		{"[nat.egress]\ndefault = \"maybe\"", "want allow or deny"},
		{"[nat]\nports = [\"80\"]", "no guest port"},
		{"[nat]\ndns = [\"8.8.8.8\"]", "want ADDR:PORT"},
		{"[nat]\nbandwidth = \"fast\"", "nat.bandwidth"},
		{"[nat]\nbandwidth = \"100\"", "at least 1024"},
		{"[nat]\nmax_connections = -1", "max_connections -1"},
		{"network = \"nat\"\n[pool]\nsize = 2\n[nat]\nports = [\"8080:80\"]", "every pool sandbox would publish the same host ports"},
	} {
		_, err := Parse([]byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want error containing %q", tc.body, err, tc.want)
		}
	}
}

func TestPoolDefaults(t *testing.T) {
	c, err := Parse([]byte("state_dir = \"/run/x\"\n[pool]\nsize = 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Pool.Size != 3 || c.PoolSocket() != "/run/x/pool.sock" || filepath.Dir(string(c.PoolDir())) != "/run/x/pool" {
		t.Errorf("pool %+v socket %s dir %s", c.Pool, c.PoolSocket(), c.PoolDir())
	}
	if c.Pool.Containerd != "/run/containerd/containerd.sock" || c.Pool.Namespace != "default" || c.Pool.Snapshotter != "overlayfs" {
		t.Errorf("pool image defaults %+v", c.Pool)
	}
	dir := c.PoolDir()
	c.Pool.Socket = "/tmp/p.sock"
	if c.PoolSocket() != "/tmp/p.sock" {
		t.Errorf("explicit socket ignored: %s", c.PoolSocket())
	}
	if c.PoolDir() == dir || filepath.Dir(string(c.PoolDir())) != c.Layout().Pools() {
		t.Errorf("pools of two sockets share directory %s (or it is not below %s)", dir, c.Layout().Pools())
	}
}

func TestPoolImageNeedsMemoryOverlay(t *testing.T) {
	_, err := Parse([]byte("rootfs_overlay = \"self\"\n[pool]\nsize = 1\nimage = \"x:1\"\n"))
	if err == nil || !strings.Contains(err.Error(), "rootfs_overlay") {
		t.Errorf("image pool with rootfs_overlay self: err = %v, want one naming rootfs_overlay", err)
	}
	if _, err := Parse([]byte("[pool]\nsize = 1\nimage = \"x:1\"\ncontainerd = \"rel.sock\"\n")); err == nil {
		t.Error("a relative pool.containerd socket path was accepted")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.toml")); err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Errorf("explicit missing file: err = %v", err)
	}
	p := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(p, []byte(`bogus = 1`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("error should name the file and the key: %v", err)
	}
}

func TestSentryPath(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, api.ShimBinary)
	t.Setenv("PATH", "")
	c := Default()
	if _, err := c.SentryPath(self); err == nil || !strings.Contains(err.Error(), "make install") {
		t.Errorf("missing sentry: err = %v", err)
	}
	sentry := filepath.Join(dir, api.SentryBinary)
	if err := os.WriteFile(sentry, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := c.SentryPath(self); err != nil || p != sentry {
		t.Errorf("SentryPath next to shim = %q, %v", p, err)
	}
	c.Sentry = filepath.Join(dir, "nope")
	if _, err := c.SentryPath(self); err == nil || !strings.Contains(err.Error(), c.Sentry) {
		t.Errorf("configured missing sentry: err = %v", err)
	}
	if err := os.Chmod(sentry, 0o644); err != nil {
		t.Fatal(err)
	}
	c.Sentry = sentry
	if _, err := c.SentryPath(self); err == nil || !strings.Contains(err.Error(), "not an executable") {
		t.Errorf("non-executable sentry: err = %v", err)
	}
}

func TestNATConfig(t *testing.T) {
	c, err := Parse([]byte("network = \"nat\"\n[nat]\ndns = [\"127.0.0.1:53\"]\nports = [\"8080:80\"]\nmax_connections = 128\nbandwidth = \"8M\"\n[nat.egress]\ndefault = \"deny\"\nallow = [\"pypi.org:443\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	n := c.NAT.API()
	if n.Egress == nil || n.Egress.Default != "deny" || n.Egress.Allow[0] != "pypi.org:443" || n.Ports[0] != "8080:80" || n.MaxConnections != 128 || n.Bandwidth != 8<<20 {
		t.Errorf("NAT = %+v", n)
	}
	flags := strings.Join(c.SentryFlagList(), " ")
	if !strings.Contains(flags, "--network=none") {
		t.Errorf("flags %q: a NAT sandbox's gVisor runs with --network=none", flags)
	}
}

func TestJanitorDurations(t *testing.T) {
	c, err := Parse([]byte("[janitor]\ninterval = \"30s\"\nmax_lifetime = \"2h\"\nvolume_dirs = [\"/var/lib/vols\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Janitor.Interval != 30*time.Second || c.Janitor.MaxLifetime != 2*time.Hour || c.Janitor.MinAge != time.Minute || c.Janitor.VolumeDirs[0] != "/var/lib/vols" {
		t.Errorf("janitor: %+v", c.Janitor)
	}
	if _, err := Parse([]byte("[janitor]\nvolume_dirs = [\"vols\"]\n")); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("relative volume dir: %v", err)
	}
}
