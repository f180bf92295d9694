package installer

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

	"github.com/containerd/containerd/v2/cmd/containerd/server/config"

	gvxconfig "github.com/gvxrun/gvx/config"
)

var binaries = []string{"containerd-shim-gvx-v2", "gvx-shim", "gvx-sentry", "gvx-runtime", "gvx-hook", "gvx-pause", "gvx-relay", "gvx-nat", "gvx"}

// shells are the shells the script must run under: the node image's
// busybox (deploy/installer's image) and the host's /bin/sh.
func shells(t *testing.T) [][]string {
	out := [][]string{{"/bin/sh"}}
	if bb, err := exec.LookPath("busybox"); err == nil {
		out = append(out, []string{bb, "sh"})
	}
	return out
}

// node is a node's root under a temporary HOST_ROOT, with a directory of
// stand-in binaries to install.
type node struct {
	root, src string
	shell     []string
	env       []string
}

func newNode(t *testing.T, shell []string) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{root: filepath.Join(dir, "root"), src: filepath.Join(dir, "src"), shell: shell}
	for _, d := range []string{n.root, n.src} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range binaries {
		n.write(t, filepath.Join(n.src, b), "binary "+b+"\n", 0o755)
	}
	// NODE_ROOT as in the integration test: paths in what the script
	// writes are the installer's own, so containerd's loader finds them.
	n.env = []string{"HOST_ROOT=" + n.root, "NODE_ROOT=" + n.root, "GVX_SRC=" + n.src, "RESTART=none"}
	return n
}

func (n *node) write(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func (n *node) path(p string) string { return filepath.Join(n.root, p) }

// run runs install.sh MODE with extra environment; it returns the output
// and whether it exited 0.
func (n *node) run(t *testing.T, mode string, env ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append(append([]string{}, n.shell[1:]...), "install.sh", mode)
	cmd := exec.CommandContext(ctx, n.shell[0], args...)
	cmd.Env = append(append(append([]string{}, os.Environ()...), n.env...), env...)
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return string(out), err == nil
}

func (n *node) must(t *testing.T, mode string, env ...string) string {
	t.Helper()
	out, ok := n.run(t, mode, env...)
	if !ok {
		t.Fatalf("install.sh %s failed:\n%s", mode, out)
	}
	return out
}

func (n *node) tree(t *testing.T) Tree {
	t.Helper()
	tr, err := ReadTree(n.root)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func sameTree(t *testing.T, what string, before, after Tree) {
	t.Helper()
	if d := before.Diff(after); len(d) > 0 {
		t.Errorf("%s: the node's files differ:\n  %s", what, strings.Join(d, "\n  "))
	}
}

// loaded is containerd's view of the node's config: its own loader
// (imports followed, files merged) on the config the script edited.
func (n *node) loaded(t *testing.T) *config.Config {
	t.Helper()
	var c config.Config
	if err := config.LoadConfig(context.Background(), n.path("etc/containerd/config.toml"), &c); err != nil {
		t.Fatalf("containerd's loader: %v", err)
	}
	return &c
}

// lookup walks nested plugin tables.
func lookup(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// checkRuntime: containerd loads the gvx handler from the fragment, with
// the installed shim and config, and keeps what the node's config had.
func (n *node) checkRuntime(t *testing.T, c *config.Config) {
	t.Helper()
	rt := lookup(c.Plugins, "io.containerd.cri.v1.runtime", "containerd", "runtimes", "gvx")
	if rt == nil {
		t.Fatalf("containerd's merged config has no runtime gvx: %v", c.Plugins)
	}
	if got := lookup(rt, "runtime_type"); got != "io.containerd.gvx.v2" {
		t.Errorf("runtime_type %v", got)
	}
	shim := n.path("opt/gvx/bin/containerd-shim-gvx-v2")
	if got := lookup(rt, "runtime_path"); got != shim {
		t.Errorf("runtime_path %v, want %s", got, shim)
	}
	if got := lookup(rt, "options", "ConfigPath"); got != n.path("etc/gvx/config.toml") {
		t.Errorf("options.ConfigPath %v", got)
	}
	if c.Timeouts["io.containerd.timeout.shim.cleanup"] != "30s" {
		t.Errorf("timeouts %v: want the shim cleanup timeout 30s", c.Timeouts)
	}
	if _, err := gvxconfig.Load(n.path("etc/gvx/config.toml")); err != nil {
		t.Errorf("the installed gvx config: %v", err)
	}
	for _, b := range binaries {
		got, err := os.ReadFile(n.path("opt/gvx/bin/" + b))
		if err != nil || string(got) != "binary "+b+"\n" {
			t.Errorf("installed %s: %q %v", b, got, err)
		}
	}
}

// TestInstallUninstall: for each shape of the node's containerd config
// (none, no imports, one-line, empty and multi-line imports, version 2,
// comments only), install makes containerd load the gvx handler and keep
// the node's own settings and imports; installing again changes nothing;
// uninstall leaves the node's files exactly as they were.
func TestInstallUninstall(t *testing.T) {
	base := "version = 3\nroot = \"/var/lib/containerd\"\n\n[plugins.\"io.containerd.cri.v1.runtime\".cni]\n  conf_dir = \"/etc/cni/net.d\"\n"
	cases := []struct {
		name   string
		config string // "" : no config.toml
		// imported: a file the node's config imports already (kept).
		imported bool
		// keep: a plugin key the node's config sets that must survive.
		keep []string
	}{
		{name: "no config"},
		{name: "no imports", config: base, keep: []string{"io.containerd.cri.v1.runtime", "cni", "conf_dir"}},
		{name: "one-line imports", config: "version = 3\nimports = [\"IMPORTED\"] # the node's own\n" + base[len("version = 3\n"):], imported: true,
			keep: []string{"io.containerd.cri.v1.runtime", "cni", "conf_dir"}},
		{name: "empty imports", config: "version = 3\nimports = []\n" + base[len("version = 3\n"):], keep: []string{"io.containerd.cri.v1.runtime", "cni", "conf_dir"}},
		{name: "multi-line imports", config: "# node config\nversion = 3\nimports = [\n  \"IMPORTED\",\n]\n" + base[len("version = 3\n"):], imported: true,
			keep: []string{"io.containerd.cri.v1.runtime", "cni", "conf_dir"}},
		{name: "version 2", config: "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".cni]\n  conf_dir = \"/etc/cni/net.d\"\n",
			keep: []string{"io.containerd.grpc.v1.cri", "cni", "conf_dir"}},
		{name: "comments only", config: "# containerd's defaults\n\n"},
	}
	for _, sh := range shells(t) {
		for _, tc := range cases {
			t.Run(filepath.Base(sh[0])+"/"+tc.name, func(t *testing.T) {
				n := newNode(t, sh)
				cfg := n.path("etc/containerd/config.toml")
				if tc.config != "" {
					imported := n.path("etc/containerd/other.toml")
					n.write(t, cfg, strings.ReplaceAll(tc.config, "IMPORTED", imported), 0o600)
					if tc.imported {
						n.write(t, imported, "version = 3\n[plugins.\"io.containerd.cri.v1.images\".pinned_images]\n  sandbox = \"node/pause:1\"\n", 0o644)
					}
				}
				before := n.tree(t)

				n.must(t, "install")
				installed := n.tree(t)
				c := n.loaded(t)
				n.checkRuntime(t, c)
				if tc.keep != nil && lookup(c.Plugins, tc.keep...) != "/etc/cni/net.d" {
					t.Errorf("the node's %s lost in the merge: %v", strings.Join(tc.keep, "."), c.Plugins)
				}
				if tc.imported && lookup(c.Plugins, "io.containerd.cri.v1.images", "pinned_images", "sandbox") != "node/pause:1" {
					t.Errorf("the node's own import lost: %v", c.Plugins)
				}
				if tc.config != "" {
					st, err := os.Stat(cfg)
					if err != nil || st.Mode().Perm() != 0o600 {
						t.Errorf("config.toml mode after install: %v %v, want 0600 kept", st.Mode(), err)
					}
				}

				if out := n.must(t, "install"); !strings.Contains(out, "nothing changed") {
					t.Errorf("second install: %s, want nothing changed", out)
				}
				sameTree(t, "second install", installed, n.tree(t))

				n.must(t, "uninstall")
				sameTree(t, "after uninstall", before, n.tree(t))
				if out := n.must(t, "uninstall"); !strings.Contains(out, "nothing to uninstall") {
					t.Errorf("second uninstall: %s", out)
				}
				sameTree(t, "second uninstall", before, n.tree(t))
			})
		}
	}
}

// TestInstallReplacesAndRestores: a gvx config and a fragment of the same
// name already on the node are backed up, replaced, and put back byte for
// byte (mode included); GVX_CONFIG_SRC is what gets installed.
func TestInstallReplacesAndRestores(t *testing.T) {
	n := newNode(t, shells(t)[len(shells(t))-1])
	n.write(t, n.path("etc/containerd/config.toml"), "version = 3\n", 0o644)
	n.write(t, n.path("etc/gvx/config.toml"), "log_level = \"debug\"\n", 0o600)
	n.write(t, n.path("etc/gvx/other.toml"), "keep me\n", 0o644)
	mine := filepath.Join(t.TempDir(), "gvx.toml")
	n.write(t, mine, "network = \"none\"\n", 0o644)
	before := n.tree(t)
	n.must(t, "install", "GVX_CONFIG_SRC="+mine)
	if got, _ := os.ReadFile(n.path("etc/gvx/config.toml")); string(got) != "network = \"none\"\n" {
		t.Errorf("installed gvx config %q, want GVX_CONFIG_SRC's", got)
	}
	n.must(t, "uninstall")
	sameTree(t, "after uninstall", before, n.tree(t))
}

// TestInstallRefusesOldConfig: a containerd config without version 2 or
// 3 (no imports there) is refused before anything is written.
func TestInstallRefusesOldConfig(t *testing.T) {
	n := newNode(t, shells(t)[0])
	n.write(t, n.path("etc/containerd/config.toml"), "root = \"/var/lib/containerd\"\n", 0o644)
	before := n.tree(t)
	out, ok := n.run(t, "install")
	if ok || !strings.Contains(out, "containerd config migrate") || !strings.Contains(out, "nothing was changed") {
		t.Errorf("install on a version 1 config: ok=%v %s, want a refusal naming the fix", ok, out)
	}
	sameTree(t, "refused install", before, n.tree(t))
	for _, env := range [][]string{{"RESTART=reboot"}, {"RESTART=command"}, {"GVX_BIN_DIR=opt/gvx"}, {"GVX_SRC=/nonexistent"},
		{"GVX_POOL_UNIT=etc/systemd/system/gvx-pool.service"}, {"GVX_POOL_UNIT=/etc/systemd/system/gvx-pool"}} {
		if out, ok := n.run(t, "install", env...); ok || !strings.Contains(out, strings.SplitN(env[0], "=", 2)[0]) {
			t.Errorf("install with %v: ok=%v %s, want an error naming it", env, ok, out)
		}
	}
	sameTree(t, "bad settings", before, n.tree(t))
}

// TestUninstallAfterNodeChange: when the node's config changed after
// install, uninstall keeps the change and removes only gvx's import.
func TestUninstallAfterNodeChange(t *testing.T) {
	n := newNode(t, shells(t)[0])
	cfg := n.path("etc/containerd/config.toml")
	orig := "version = 3\nimports = [\"/etc/containerd/a.toml\"]\n"
	n.write(t, cfg, orig, 0o644)
	n.must(t, "install")
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("[debug]\n  level = \"debug\"\n")
	f.Close()
	out := n.must(t, "uninstall")
	got, _ := os.ReadFile(cfg)
	if want := orig + "[debug]\n  level = \"debug\"\n"; string(got) != want || !strings.Contains(out, "removed only its import") {
		t.Errorf("config after uninstall %q (%s), want %q", got, out, want)
	}
}

// TestRestartHook: the restart command runs when containerd's view
// changed (install, uninstall) and not for an install that changed
// nothing; a failing one fails the script with the command named.
func TestRestartHook(t *testing.T) {
	n := newNode(t, shells(t)[0])
	count := filepath.Join(t.TempDir(), "restarts")
	hook := []string{"RESTART=command", "RESTART_CMD=echo restart >> " + count}
	n.must(t, "install", hook...)
	n.must(t, "install", hook...)
	n.must(t, "uninstall", hook...)
	if got, _ := os.ReadFile(count); string(got) != "restart\nrestart\n" {
		t.Errorf("restarts %q: want one for install, none for the unchanged install, one for uninstall", got)
	}
	// A new gvx config needs no restart: the shim reads it at each create.
	mine := filepath.Join(t.TempDir(), "gvx.toml")
	n.write(t, mine, "log_level = \"debug\"\n", 0o644)
	n.must(t, "install", hook...)
	if out := n.must(t, "install", append(hook, "GVX_CONFIG_SRC="+mine)...); !strings.Contains(out, "wrote /etc/gvx/config.toml") {
		t.Errorf("install with a new gvx config: %s", out)
	}
	if got, _ := os.ReadFile(count); string(got) != "restart\nrestart\nrestart\n" {
		t.Errorf("restarts %q after a gvx config change: want none for it", got)
	}
	n.must(t, "uninstall")
	out, ok := n.run(t, "install", "RESTART=command", "RESTART_CMD=exit 3")
	if ok || !strings.Contains(out, "RESTART_CMD failed (exit 3)") {
		t.Errorf("failing restart: ok=%v %s", ok, out)
	}
	n.must(t, "uninstall")
}

// TestUninstallRefusesRunningShim: while a process runs the installed shim
// binary (its pods would lose their runtime) or the installed gvx (a pool
// server, gvx serve), uninstall refuses, naming what to do, unless FORCE=1.
func TestUninstallRefusesRunningShim(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ bin, want string }{
		{"containerd-shim-gvx-v2", "drain"},
		{"gvx-shim", "drain"},
		{"gvx", "a pool server"},
	} {
		n := newNode(t, shells(t)[0])
		n.write(t, filepath.Join(n.src, tc.bin), string(data), 0o755)
		before := n.tree(t)
		n.must(t, "install")
		proc := exec.Command(n.path("opt/gvx/bin/"+tc.bin), "600")
		if err := proc.Start(); err != nil {
			t.Fatal(err)
		}
		out, ok := n.run(t, "uninstall")
		if ok || !strings.Contains(out, tc.want) || !strings.Contains(out, strconv.Itoa(proc.Process.Pid)) {
			t.Errorf("uninstall with a running %s: ok=%v %s, want a refusal naming pid %d and %q", tc.bin, ok, out, proc.Process.Pid, tc.want)
		}
		n.must(t, "uninstall", "FORCE=1")
		_ = proc.Process.Kill()
		_ = proc.Wait()
		sameTree(t, "forced uninstall", before, n.tree(t))
	}
}

// TestWaitUninstallOnStop: the DaemonSet's main container (mode wait)
// exits 0 on SIGTERM, and with UNINSTALL_ON_STOP=true uninstalls first.
func TestWaitUninstallOnStop(t *testing.T) {
	for _, sh := range shells(t) {
		t.Run(filepath.Base(sh[0]), func(t *testing.T) {
			n := newNode(t, sh)
			before := n.tree(t)
			n.must(t, "install")
			args := append(append([]string{}, sh[1:]...), "install.sh", "wait")
			cmd := exec.Command(sh[0], args...)
			cmd.Env = append(append(os.Environ(), n.env...), "UNINSTALL_ON_STOP=true")
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 100 && !strings.Contains(out.String(), "waiting"); i++ {
				time.Sleep(20 * time.Millisecond)
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil || !strings.Contains(out.String(), "uninstalled") {
					t.Errorf("wait after SIGTERM: %v\n%s", err, out.String())
				}
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("wait did not end on SIGTERM:\n%s", out.String())
			}
			sameTree(t, "after stop", before, n.tree(t))
		})
	}
}

// fakeSystemctl is a SYSTEMCTL that records its calls, one per line, in
// the file it returns.
func fakeSystemctl(t *testing.T, n *node) (env []string, calls string) {
	t.Helper()
	dir := t.TempDir()
	calls = filepath.Join(dir, "calls")
	script := filepath.Join(dir, "systemctl")
	n.write(t, script, "#!/bin/sh\necho \"$*\" >> "+calls+"\n", 0o755)
	return []string{"RESTART=systemd", "SYSTEMCTL=" + script}, calls
}

// takeCalls returns the recorded systemctl calls and forgets them.
func takeCalls(t *testing.T, calls string) string {
	t.Helper()
	data, err := os.ReadFile(calls)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	_ = os.Remove(calls)
	return strings.ReplaceAll(strings.TrimSpace(string(data)), "\n", "; ")
}

// TestInstallPoolUnit: a gvx config with a [pool] of size > 0 (as a
// table or a dotted key) gets the pool server's systemd unit, running the
// installed gvx on the installed config, which systemd-analyze accepts;
// with RESTART=systemd the installer reloads systemd and (re)starts the
// server when the unit, binaries or config changed, only makes sure it
// runs otherwise, removes the unit when the config loses its pool, and
// uninstall stops and disables it before the files go. Configs of size 0
// or a pool-like table get no unit.
func TestInstallPoolUnit(t *testing.T) {
	unit := "etc/systemd/system/gvx-pool.service"
	for _, tc := range []struct {
		config string
		pool   bool
	}{
		{"[pool]\nsize = 2\n", true},
		{"log_level = \"info\"\n[pool] # warm\n  size=4 # sandboxes\n  socket = \"/run/gvx/p.sock\"\n", true},
		{"pool.size = 1\n", true},
		{"[pool]\nsize = 0\n", false},
		{"[pool]\nsocket = \"/run/gvx/p.sock\"\n", false},
		{"[docker]\nsize = 3\n", false},
		{"[pool.extra]\nsize = 3\n", false},
	} {
		n := newNode(t, shells(t)[0])
		cfg := filepath.Join(t.TempDir(), "gvx.toml")
		n.write(t, cfg, tc.config, 0o644)
		before := n.tree(t)
		n.must(t, "install", "GVX_CONFIG_SRC="+cfg)
		_, err := os.Stat(n.path(unit))
		if got := err == nil; got != tc.pool {
			t.Errorf("config %q: pool unit written %v, want %v", tc.config, got, tc.pool)
		}
		n.must(t, "uninstall")
		sameTree(t, "uninstall", before, n.tree(t))
	}

	for _, sh := range shells(t) {
		t.Run(filepath.Base(sh[0]), func(t *testing.T) {
			n := newNode(t, sh)
			sysd, calls := fakeSystemctl(t, n)
			cfg := filepath.Join(t.TempDir(), "gvx.toml")
			n.write(t, cfg, "[pool]\nsize = 2\n", 0o644)
			env := append(sysd, "GVX_CONFIG_SRC="+cfg)
			before := n.tree(t)

			n.must(t, "install", env...)
			data, err := os.ReadFile(n.path(unit))
			if err != nil {
				t.Fatalf("no pool unit: %v", err)
			}
			want := "ExecStart=" + n.path("opt/gvx/bin/gvx") + " pool serve --config " + n.path("etc/gvx/config.toml") + "\n"
			if !strings.Contains(string(data), want) || !strings.Contains(string(data), "KillMode=process\n") {
				t.Errorf("pool unit:\n%s\nwant %q and KillMode=process", data, want)
			}
			if sa, err := exec.LookPath("systemd-analyze"); err == nil {
				if out, err := exec.Command(sa, "verify", n.path(unit)).CombinedOutput(); err != nil {
					t.Errorf("systemd-analyze verify: %v\n%s", err, out)
				}
			}
			if got, want := takeCalls(t, calls), "daemon-reload; enable gvx-pool.service; restart gvx-pool.service; restart containerd"; got != want {
				t.Errorf("install: systemctl %q, want %q", got, want)
			}
			n.must(t, "install", env...)
			if got, want := takeCalls(t, calls), "start gvx-pool.service"; got != want {
				t.Errorf("unchanged install: systemctl %q, want %q", got, want)
			}
			n.write(t, cfg, "[pool]\nsize = 3\n", 0o644)
			n.must(t, "install", env...)
			if got, want := takeCalls(t, calls), "enable gvx-pool.service; restart gvx-pool.service"; got != want {
				t.Errorf("install of a new pool config: systemctl %q, want %q (no containerd restart)", got, want)
			}
			n.write(t, cfg, "log_level = \"debug\"\n", 0o644)
			if out := n.must(t, "install", env...); !strings.Contains(out, "has no [pool]") {
				t.Errorf("install without a pool: %s", out)
			}
			if _, err := os.Stat(n.path(unit)); err == nil {
				t.Errorf("pool unit still there after an install without a pool")
			}
			if got, want := takeCalls(t, calls), "disable --now gvx-pool.service; daemon-reload"; got != want {
				t.Errorf("install without a pool: systemctl %q, want %q", got, want)
			}
			n.write(t, cfg, "[pool]\nsize = 1\n", 0o644)
			n.must(t, "install", env...)
			takeCalls(t, calls)
			n.must(t, "uninstall", sysd...)
			if got, want := takeCalls(t, calls), "disable --now gvx-pool.service; daemon-reload; restart containerd"; got != want {
				t.Errorf("uninstall: systemctl %q, want %q", got, want)
			}
			sameTree(t, "after uninstall", before, n.tree(t))
		})
	}
}
