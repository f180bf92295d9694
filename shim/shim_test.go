package shim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/pool"
)

func TestGroupOf(t *testing.T) {
	if g := groupOf("c1", nil); g != "c1" {
		t.Errorf("no annotations: %q", g)
	}
	if g := groupOf("c1", map[string]string{"io.kubernetes.cri.sandbox-id": "pod1"}); g != "pod1" {
		t.Errorf("CRI pod: %q", g)
	}
	if g := groupOf("c1", map[string]string{"io.containerd.gvx.v2.group": "g", "io.kubernetes.cri.sandbox-id": "pod1"}); g != "g" {
		t.Errorf("gvx group label first: %q", g)
	}
}

func TestReleaseSentryRoot(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "group", "ns")
	if err := os.MkdirAll(root, 0o711); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(root, "c1_sandbox:c1.state")
	if err := os.WriteFile(state, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := releaseSentryRoot(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("root with a live sandbox was removed: %v", err)
	}
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	if err := releaseSentryRoot(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "group")); !os.IsNotExist(err) {
		t.Errorf("empty sentry root and its group dir should be gone: %v", err)
	}
	if err := releaseSentryRoot(root); err != nil {
		t.Errorf("releasing twice: %v", err)
	}
}

func TestCheckTraversable(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{base, filepath.Dir(base)} { // t.TempDir makes both 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	closed := filepath.Join(base, "closed")
	target := filepath.Join(closed, "rootfs")
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	err := checkTraversable(target, 100000)
	if err == nil || !strings.Contains(err.Error(), closed) || !strings.Contains(err.Error(), "chmod o+x") {
		t.Errorf("err = %v, want it to name %s and the fix", err, closed)
	}
	if err := os.Chmod(closed, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := checkTraversable(target, 100000); err != nil {
		t.Errorf("traversable path refused: %v", err)
	}
}

func TestPoolBlocker(t *testing.T) {
	cfg := config.Default()
	cfg.Pool.Size = 2
	spec := func() *specs.Spec {
		return &specs.Spec{Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.NetworkNamespace}}}}
	}
	if why := poolBlocker(cfg, spec(), "", false); why != "" {
		t.Errorf("plain task blocked: %s", why)
	}
	shares := uint64(1024)
	s := spec()
	s.Linux.Resources = &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: &shares}}
	if why := poolBlocker(cfg, s, "", false); why != "" {
		t.Errorf("default cpu shares blocked: %s", why)
	}
	limit := int64(1 << 30)
	for name, tc := range map[string]struct {
		cfg     func(*config.Config)
		spec    func(*specs.Spec)
		role    string
		volumes bool
		want    string
	}{
		"pool off":    {cfg: func(c *config.Config) { c.Pool.Size = 0 }, want: "pool off"},
		"pod":         {role: "container", want: "CRI pod"},
		"ext4 rootfs": {volumes: true, want: "ext4lite root filesystem"},
		"hooks":       {spec: func(s *specs.Spec) { s.Hooks = &specs.Hooks{CreateRuntime: []specs.Hook{{Path: "/x"}}} }, want: "hooks"},
		"netns":       {spec: func(s *specs.Spec) { s.Linux.Namespaces[0].Path = "/var/run/netns/x" }, want: "joins network namespace"},
		"host net":    {spec: func(s *specs.Spec) { s.Linux.Namespaces = nil }, want: "host network"},
		"resources": {spec: func(s *specs.Spec) {
			s.Linux.Resources = &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}}
		}, want: "resources"},
	} {
		c, s := cfg, spec()
		if tc.cfg != nil {
			tc.cfg(&c)
		}
		if tc.spec != nil {
			tc.spec(s)
		}
		if why := poolBlocker(c, s, tc.role, tc.volumes); !strings.Contains(why, tc.want) {
			t.Errorf("%s: blocker %q, want %q", name, why, tc.want)
		}
	}
}

func TestTaskSentry(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "task1")
	bin := t.TempDir()
	sentry, front := filepath.Join(bin, "gvx-sentry"), filepath.Join(bin, "gvx-runtime")
	for _, f := range []string{sentry, front} {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link, err := taskSentry(filepath.Join(t.TempDir(), "other"), sentry, "", true)
	if target, _ := os.Readlink(link); err != nil || target != front {
		t.Errorf("task in a running sandbox: link -> %q (%v), want gvx-runtime", target, err)
	}
	link, err = taskSentry(dir, sentry, "--network=none", false)
	if err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(link); err != nil || target != sentry {
		t.Errorf("link %s -> %q (%v), want gvx-sentry", link, target, err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, sentryFlagsName)); err != nil || string(data) != "--network=none" {
		t.Errorf("flags %q (%v)", data, err)
	}
	// A sentry root below the same directory keeps it.
	if err := os.Mkdir(filepath.Join(dir, "ns"), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := releaseTaskSentry(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(link); !os.IsNotExist(err) {
		t.Errorf("link still there: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "ns")); err != nil {
		t.Fatal(err)
	}
	if err := releaseTaskSentry(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("task dir still there: %v", err)
	}
}

func TestProcessBlocker(t *testing.T) {
	layers := []string{"/s/2/fs", "/s/1/fs"}
	sb := &pool.Sandbox{ID: "gvxpool-1", Image: "img:1", Layers: layers}
	rootfs := []*typesMount{{Type: "overlay", Source: "overlay", Options: []string{"upperdir=/s/9/fs", "workdir=/s/9/work", "lowerdir=/s/2/fs:/s/1/fs"}}}
	spec := func() *specs.Spec {
		return &specs.Spec{Process: &specs.Process{Args: []string{"true"}, Cwd: "/"}, Mounts: pool.StandardMounts()}
	}
	if why := processBlocker(spec(), rootfs, sb, false, false); why != "" {
		t.Errorf("task of the pool's image with the default mounts: %q, want none", why)
	}
	for _, tc := range []struct {
		name    string
		edit    func(*specs.Spec)
		rootfs  []*typesMount
		sb      *pool.Sandbox
		volumes bool
		docker  bool
		want    string
	}{
		{name: "pool without image", sb: &pool.Sandbox{ID: "gvxpool-2"}, want: "no image"},
		{name: "other image", rootfs: []*typesMount{{Type: "overlay", Options: []string{"lowerdir=/s/3/fs"}}}, want: "not the pool's img:1"},
		{name: "rootfs directory", rootfs: []*typesMount{}, want: "not the pool's"},
		{name: "terminal", edit: func(s *specs.Spec) { s.Process.Terminal = true }, want: "terminal"},
		{name: "volumes", volumes: true, want: "volumes"},
		{name: "docker", docker: true, want: "docker"},
		{name: "hostname", edit: func(s *specs.Spec) { s.Hostname = "h" }, want: "hostname"},
		{name: "bind mount", edit: func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/data", Type: "bind", Source: "/x"})
		}, want: "mounts /data"},
		{name: "other /run", edit: func(s *specs.Spec) {
			for i := range s.Mounts {
				if s.Mounts[i].Destination == "/run" {
					s.Mounts[i].Type = "bind"
				}
			}
		}, want: "mounts /run"},
	} {
		s := spec()
		if tc.edit != nil {
			tc.edit(s)
		}
		r, b := rootfs, sb
		if tc.rootfs != nil {
			r = tc.rootfs
		}
		if tc.sb != nil {
			b = tc.sb
		}
		if why := processBlocker(s, r, b, tc.volumes, tc.docker); !strings.Contains(why, tc.want) {
			t.Errorf("%s: %q, want it to contain %q", tc.name, why, tc.want)
		}
	}
}
