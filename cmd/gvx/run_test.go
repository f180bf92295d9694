package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/volume"
)

// parseRun runs gvx run's flag parsing on args and returns the Config.
func parseRun(t *testing.T, args ...string) (gvx.Config, error) {
	t.Helper()
	var cfg gvx.Config
	var cerr error
	cmd := runCommand()
	cmd.Action = func(ctx context.Context, c *cli.Command) error {
		a := c.Args().Slice()
		cfg, cerr = runConfig(c, a[0], a[1:])
		return nil
	}
	if err := cmd.Run(context.Background(), append([]string{"run"}, args...)); err != nil {
		return cfg, err
	}
	return cfg, cerr
}

func TestRunFlags(t *testing.T) {
	cfg, err := parseRun(t, "-it", "--rm", "-m", "4g", "--cpus", "1.5", "--pids-limit", "200", "--disk", "1g",
		"-e", "A=1", "-e", "HOME", "-w", "/w", "-u", "1000", "--name", "box1", "--timeout", "2m",
		"img:latest", "sh", "-c", "ls -l", "--not-a-flag")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.TTY || cfg.ID != "box1" || cfg.Image != "img:latest" || cfg.Workdir != "/w" || cfg.User != "1000" || cfg.Timeout.Minutes() != 2 {
		t.Errorf("config %+v", cfg)
	}
	if !reflect.DeepEqual(cfg.Cmd, []string{"sh", "-c", "ls -l", "--not-a-flag"}) {
		t.Errorf("command %q: flags after IMAGE belong to the command", cfg.Cmd)
	}
	if cfg.Resources != (gvx.Resources{MemoryBytes: 4 << 30, CPUMillis: 1500, Pids: 200, DiskBytes: 1 << 30}) {
		t.Errorf("resources %+v", cfg.Resources)
	}
	if len(cfg.Env) != 2 || cfg.Env[0] != "A=1" || cfg.Env[1] != "HOME="+os.Getenv("HOME") {
		t.Errorf("env %q", cfg.Env)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--net", "host", "img"}, "want none (loopback) or nat"},
		{[]string{"-p", "8080:80", "img"}, "need --net nat"},
		{[]string{"--allow", "pypi.org", "img"}, "need --net nat"},
		{[]string{"--max-connections", "4", "img"}, "need --net nat"},
		{[]string{"--net", "nat", "--bandwidth", "fast", "img"}, "--bandwidth"},
		{[]string{"-p", "unix:rel.sock:/run/a/a.sock", "img"}, "absolute"},
		{[]string{"--cpus", "0", "img"}, "--cpus"},
		{[]string{"-m", "4x", "img"}, "-m"},
		{[]string{"--name", "Not OK", "img"}, "--name"},
		{[]string{"-v", "/nonexistent:/x:ro", "img"}, "no such file"},
	} {
		if _, err := parseRun(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
	cfg, err = parseRun(t, "--net", "nat", "-p", "8080:80", "-p", "unix:/tmp/e.sock:2375", "-p", "unix:/tmp/h.sock:/run/app/g.sock",
		"--allow", "10.0.2.2:5000", "--egress", "deny", "--dns", "127.0.0.1:53", "--max-connections", "64", "--bandwidth", "8m", "img")
	if err != nil || cfg.Network != gvx.NetworkNAT || !reflect.DeepEqual(cfg.NAT, &gvx.NAT{Ports: []string{"8080:80", "unix:/tmp/e.sock:2375"},
		EgressDefault: "deny", EgressAllow: []string{"10.0.2.2:5000"}, DNS: []string{"127.0.0.1:53"}, MaxConnections: 64, Bandwidth: 8 << 20}) || len(cfg.Publish) != 1 {
		t.Errorf("--net nat: %+v %+v, %v", cfg, cfg.NAT, err)
	}
	cfg, err = parseRun(t, "-p", "unix:/tmp/h.sock:/run/app/g.sock", "img")
	if err != nil || len(cfg.Publish) != 1 || cfg.Publish[0] != (gvx.Publish{HostPath: "/tmp/h.sock", GuestPath: "/run/app/g.sock"}) {
		t.Errorf("publish: %+v, %v", cfg.Publish, err)
	}
}

func TestParseVolume(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "v.ext4")
	if _, err := volume.Create(context.Background(), img, volume.CreateOptions{Size: 16 << 20}); err != nil {
		t.Skipf("mkfs.ext4: %v", err)
	}
	plain := filepath.Join(dir, "plain.txt")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for spec, want := range map[string]gvx.Mount{
		img + ":/var/lib/docker":     {Type: gvx.MountVolume, Source: img, Target: "/var/lib/docker"},
		img + ":/data:clone":         {Type: gvx.MountVolume, Source: img, Target: "/data", Clone: true},
		img + ":/data:ro":            {Type: gvx.MountVolume, Source: img, Target: "/data", ReadOnly: true},
		plain + ":/etc/plain.txt:ro": {Type: gvx.MountBind, Source: plain, Target: "/etc/plain.txt", ReadOnly: true},
		dir + ":/in:ro":              {Type: gvx.MountBind, Source: dir, Target: "/in", ReadOnly: true},
	} {
		got, err := parseVolume(spec)
		if err != nil || got != want {
			t.Errorf("-v %s: %+v, %v; want %+v", spec, got, err, want)
		}
	}
	for spec, why := range map[string]string{
		dir + ":/in":          "read-only",
		plain + ":/p:clone":   "clone",
		img + ":relative":     "SOURCE:/guest/path",
		img + ":/d:bogus":     "unknown option",
		"/nothing/here:/d:ro": "no such file",
	} {
		if _, err := parseVolume(spec); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("-v %s: %v, want an error naming %q", spec, err, why)
		}
	}
}
