package adopt

import (
	"reflect"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/mount"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/pool/bootspec"
	"github.com/gvxrun/gvx/sandbox"
)

func TestPoolBlocker(t *testing.T) {
	cfg := config.Default()
	cfg.Pool.Size = 2
	spec := func() *specs.Spec {
		return &specs.Spec{Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.NetworkNamespace}}}}
	}
	if why := Blocker(cfg, spec(), "", false); why != "" {
		t.Errorf("plain task blocked: %s", why)
	}
	shares := uint64(1024)
	s := spec()
	s.Linux.Resources = &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: &shares}}
	if why := Blocker(cfg, s, "", false); why != "" {
		t.Errorf("default cpu shares blocked: %s", why)
	}
	// A pod's sandbox container adopts although it joins the pod's
	// network namespace (gvx-sentry attaches it to the running sandbox).
	pause := spec()
	pause.Linux.Namespaces[0].Path = "/var/run/netns/cni-1"
	two := uint64(2)
	pause.Linux.Resources = &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: &two}}
	if why := Blocker(cfg, pause, "sandbox", false); why != "" {
		t.Errorf("pod sandbox container blocked: %s", why)
	}
	pause.Linux.Namespaces[0].Path = ""
	if why := Blocker(cfg, pause, "", false); !strings.Contains(why, "resources") {
		t.Errorf("a plain task with cpu shares 2: blocker %q, want resources", why)
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
		"pod":         {role: "container", want: "CRI pod's application container"},
		"pod hostnet": {role: "sandbox", spec: func(s *specs.Spec) { s.Linux.Namespaces = nil }, want: "host network"},
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
		if why := Blocker(c, s, tc.role, tc.volumes); !strings.Contains(why, tc.want) {
			t.Errorf("%s: blocker %q, want %q", name, why, tc.want)
		}
	}
}

func TestProcessBlocker(t *testing.T) {
	layers := []string{"/s/2/fs", "/s/1/fs"}
	sb := &sandbox.Sandbox{ID: "gvxpool-1", Pool: &sandbox.Pool{Image: "img:1", Layers: layers}}
	rootfs := []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{"upperdir=/s/9/fs", "workdir=/s/9/work", "lowerdir=/s/2/fs:/s/1/fs"}}}
	spec := func() *specs.Spec {
		return &specs.Spec{Process: &specs.Process{Args: []string{"true"}, Cwd: "/"}, Mounts: bootspec.StandardMounts()}
	}
	if why := ProcessBlocker(spec(), rootfs, sb, false, false); why != "" {
		t.Errorf("task of the pool's image with the default mounts: %q, want none", why)
	}
	defaults := spec()
	defaults.Linux = &specs.Linux{MaskedPaths: []string{"/proc/kcore", "/sys/firmware"}, ReadonlyPaths: []string{"/proc/sys"}}
	if why := ProcessBlocker(defaults, rootfs, sb, false, false); why != "" {
		t.Errorf("task with containerd's default masks: %q, want none", why)
	}
	for _, tc := range []struct {
		name    string
		edit    func(*specs.Spec)
		rootfs  []mount.Mount
		sb      *sandbox.Sandbox
		volumes bool
		docker  bool
		want    string
	}{
		{name: "pool without image", sb: &sandbox.Sandbox{ID: "gvxpool-2", Pool: &sandbox.Pool{}}, want: "no image"},
		{name: "other image", rootfs: []mount.Mount{{Type: "overlay", Options: []string{"lowerdir=/s/3/fs"}}}, want: "not the pool's img:1"},
		{name: "rootfs directory", rootfs: []mount.Mount{}, want: "not the pool's"},
		{name: "terminal", edit: func(s *specs.Spec) { s.Process.Terminal = true }, want: "terminal"},
		{name: "volumes", volumes: true, want: "volumes"},
		{name: "docker", docker: true, want: "docker"},
		{name: "hostname", edit: func(s *specs.Spec) { s.Hostname = "h" }, want: "hostname"},
		{name: "seccomp", edit: func(s *specs.Spec) {
			s.Linux = &specs.Linux{Seccomp: &specs.LinuxSeccomp{DefaultAction: "SCMP_ACT_ALLOW"}}
		}, want: "seccomp"},
		{name: "masked path", edit: func(s *specs.Spec) { s.Linux = &specs.Linux{MaskedPaths: []string{"/proc/kcore", "/etc/passwd"}} }, want: "masks"},
		{name: "read-only path", edit: func(s *specs.Spec) { s.Linux = &specs.Linux{ReadonlyPaths: []string{"/tmp"}} }, want: "read-only"},
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
		if why := ProcessBlocker(s, r, b, tc.volumes, tc.docker); !strings.Contains(why, tc.want) {
			t.Errorf("%s: %q, want it to contain %q", tc.name, why, tc.want)
		}
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

// TestPauseBlocker: a pod's sandbox container runs as a process in any
// pool sandbox with gvx-pause but a docker-mode one, and that process is
// the pool's gvx-pause.
func TestPauseBlocker(t *testing.T) {
	sb := &sandbox.Sandbox{ID: "sb1", Pool: &sandbox.Pool{Pause: "/pause"}}
	if why := PauseBlocker(sb, false); why != "" {
		t.Errorf("PauseBlocker of a plain pool's sandbox: %q", why)
	}
	if why := PauseBlocker(sb, true); !strings.Contains(why, "docker") {
		t.Errorf("PauseBlocker in docker mode: %q", why)
	}
	if why := PauseBlocker(&sandbox.Sandbox{ID: "sb2"}, false); !strings.Contains(why, "gvx-pause") {
		t.Errorf("PauseBlocker of a sandbox no pool booted: %q", why)
	}
	spec := &specs.Spec{Process: &specs.Process{Args: []string{"/pause"}, User: specs.User{UID: 65535}}}
	PauseProcess(spec, &sandbox.Sandbox{Pool: &sandbox.Pool{Pause: "/.gvx-pause"}})
	if len(spec.Process.Args) != 1 || spec.Process.Args[0] != "/.gvx-pause" || spec.Process.User.UID != 65535 {
		t.Errorf("PauseProcess: %+v", spec.Process)
	}
}
