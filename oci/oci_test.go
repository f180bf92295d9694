package oci

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/contracttest"
	"github.com/gvxrun/gvx/config"
)

func baseSpec() *specs.Spec {
	return &specs.Spec{
		Root:    &specs.Root{Path: "rootfs"},
		Process: &specs.Process{Args: []string{"sh"}, Cwd: "/"},
		Linux:   &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}}},
	}
}

func TestPrepareAddsUserNS(t *testing.T) {
	s := baseSpec()
	m, err := Prepare(s, config.Default())
	if err != nil {
		t.Fatal(err)
	}
	if m.HostUID != 100000 || m.Size != 65536 {
		t.Errorf("mapping %+v", m)
	}
	n := 0
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.UserNamespace {
			n++
		}
	}
	if n != 1 || len(s.Linux.UIDMappings) != 1 || s.Linux.UIDMappings[0].HostID != 100000 || s.Linux.GIDMappings[0].HostID != 100000 {
		t.Errorf("user namespace not set up: %+v", s.Linux)
	}
	if got := strings.Join(m.IDMapOptions(), ","); got != "uidmap=0:100000:65536,gidmap=0:100000:65536" {
		t.Errorf("IDMapOptions = %q", got)
	}
}

func TestPrepareKeepsUnprivilegedMapping(t *testing.T) {
	s := baseSpec()
	s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
	s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: 300000, Size: 1000}}
	s.Linux.GIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: 300000, Size: 1000}}
	m, err := Prepare(s, config.Default())
	if err != nil {
		t.Fatal(err)
	}
	if m.HostUID != 300000 || m.Size != 1000 {
		t.Errorf("mapping %+v, want the spec's own", m)
	}
}

func TestPrepareRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		mod  func(*specs.Spec)
		want string
	}{
		"no root":        {func(s *specs.Spec) { s.Root = nil }, "root.path"},
		"no args":        {func(s *specs.Spec) { s.Process.Args = nil }, "process.args"},
		"relative cwd":   {func(s *specs.Spec) { s.Process.Cwd = "x" }, "process.cwd"},
		"no linux":       {func(s *specs.Spec) { s.Linux = nil }, "linux section"},
		"relative mount": {func(s *specs.Spec) { s.Mounts = []specs.Mount{{Destination: "data"}} }, "mount destination"},
		"root to root": {func(s *specs.Spec) {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
			s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: 0, Size: 65536}}
			s.Linux.GIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: 0, Size: 65536}}
		}, "host id 0"},
		"rshared rootfs": {func(s *specs.Spec) { s.Linux.RootfsPropagation = "rshared" }, "linux.rootfsPropagation \"rshared\" is not supported"},
		"shared mount": {func(s *specs.Spec) {
			s.Mounts = []specs.Mount{{Destination: "/d", Source: "/h", Type: "bind", Options: []string{"rbind", "shared"}}}
		}, "mount /d (source /h) has \"shared\" propagation"},
		"rro tmpfs": {func(s *specs.Spec) {
			s.Mounts = []specs.Mount{{Destination: "/t", Source: "tmpfs", Type: "tmpfs", Options: []string{"rro"}}}
		}, "bind mounts only"},
		"rro rw": {func(s *specs.Spec) {
			s.Mounts = []specs.Mount{{Destination: "/d", Source: "/h", Type: "bind", Options: []string{"rbind", "rro", "rw"}}}
		}, "both rro and rw"},
		"join userns": {func(s *specs.Spec) {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace, Path: "/proc/1/ns/user"})
		}, "not supported"},
	} {
		s := baseSpec()
		tc.mod(s)
		if _, err := Prepare(s, config.Default()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}

// TestPropagationAccepted: private and slave propagation are gVisor's
// own and pass.
func TestPropagationAccepted(t *testing.T) {
	for _, p := range []string{"", "rslave", "slave", "rprivate", "private"} {
		s := baseSpec()
		s.Linux.RootfsPropagation = p
		s.Mounts = []specs.Mount{{Destination: "/d", Source: "/h", Type: "bind", Options: []string{"rbind", "rslave"}},
			{Destination: "/r", Source: "/h", Type: "bind", Options: []string{"rbind", "rprivate", "rro"}}}
		if _, err := Prepare(s, config.Default()); err != nil {
			t.Errorf("rootfsPropagation %q: %v", p, err)
		}
	}
}

func TestDefaultResources(t *testing.T) {
	c := config.Default()
	c.Resources = config.Resources{MemoryBytes: 1 << 30, CPUMillis: 1500}
	s := baseSpec()
	if _, err := Prepare(s, c); err != nil {
		t.Fatal(err)
	}
	r := s.Linux.Resources
	if *r.Memory.Limit != 1<<30 || *r.CPU.Quota != 150000 || *r.CPU.Period != 100000 {
		t.Errorf("resources %+v %+v", r.Memory, r.CPU)
	}
	// A spec's own limit wins.
	s = baseSpec()
	own := int64(1 << 20)
	s.Linux.Resources = &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &own}}
	if _, err := Prepare(s, c); err != nil {
		t.Fatal(err)
	}
	if *s.Linux.Resources.Memory.Limit != own {
		t.Errorf("spec's memory limit overridden: %d", *s.Linux.Resources.Memory.Limit)
	}
}

func TestAddCreateRuntimeHookFirst(t *testing.T) {
	s := baseSpec()
	s.Hooks = &specs.Hooks{CreateRuntime: []specs.Hook{{Path: "/usr/bin/nerdctl"}}}
	AddCreateRuntimeHook(s, "/usr/local/bin/gvx-hook", "--flag")
	h := s.Hooks.CreateRuntime
	if len(h) != 2 || h[0].Path != "/usr/local/bin/gvx-hook" || strings.Join(h[0].Args, " ") != "gvx-hook --flag" || h[1].Path != "/usr/bin/nerdctl" {
		t.Errorf("hooks %+v", h)
	}
}

func TestPodRole(t *testing.T) {
	s := baseSpec()
	if role, _ := PodRole(s); role != RoleNone {
		t.Errorf("plain task: role %q", role)
	}
	// CRI's names, as the contract spells them (not this package's).
	c, err := contracttest.Load()
	if err != nil {
		t.Fatal(err)
	}
	for role, want := range map[string]string{c.Name("cri_role_container"): RoleContainer, c.Name("cri_role_sandbox"): RolePause} {
		s.Annotations = map[string]string{c.Name("cri_container_type"): role, c.Name("cri_sandbox_id"): "p1", "keep": "me"}
		if got, pod := PodRole(s); got != want || pod != "p1" {
			t.Errorf("role %q pod %q, want %q of p1", got, pod, want)
		}
	}
}

// TestDockerAnnotation: the annotation that asks for docker mode is the
// contract's.
func TestDockerAnnotation(t *testing.T) {
	c, err := contracttest.Load()
	if err != nil {
		t.Fatal(err)
	}
	s := baseSpec()
	s.Annotations = map[string]string{c.Name("annotation_docker"): "true"}
	if req, set, err := DockerRequested(s); !req || !set || err != nil {
		t.Errorf("DockerRequested = %v, %v, %v", req, set, err)
	}
}

// TestConfigResources: what the config's defaults give a spec without
// resources is exactly ConfigResources (pools compare the two).
func TestConfigResources(t *testing.T) {
	for _, r := range []config.Resources{{}, {MemoryBytes: 512 << 20}, {CPUMillis: 1500}, {MemoryBytes: 1 << 30, CPUMillis: 250}} {
		s := &specs.Spec{Linux: &specs.Linux{Resources: &specs.LinuxResources{}}}
		applyResources(s, r)
		if got, want := SandboxResources(s.Linux.Resources), ConfigResources(r); got != want {
			t.Errorf("%+v: applied %+v, ConfigResources %+v", r, got, want)
		}
	}
}

func TestNetworkMode(t *testing.T) {
	c := config.Default()
	s := baseSpec()
	s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	if m, err := NetworkMode(s, c); err != nil || m != "sandbox" {
		t.Errorf("no annotation: %q, %v; want the config's", m, err)
	}
	s.Annotations = map[string]string{api.AnnotationNetwork: "nat"}
	if m, err := NetworkMode(s, c); err != nil || m != "nat" {
		t.Errorf("annotation nat: %q, %v", m, err)
	}
	s.Annotations[api.AnnotationNetwork] = "bridge"
	if _, err := NetworkMode(s, c); err == nil || !strings.Contains(err.Error(), api.AnnotationNetwork) {
		t.Errorf("annotation bridge: %v, want an error naming the annotation", err)
	}

	// The host's network namespace (no network namespace in the spec):
	// "sandbox" becomes the host's stack; none and nat stay.
	h := baseSpec()
	if OwnNetNS(h) || !OwnNetNS(s) {
		t.Fatalf("OwnNetNS: %v without a network namespace, %v with one", OwnNetNS(h), OwnNetNS(s))
	}
	if FreshNetNS(h) || !FreshNetNS(s) {
		t.Fatalf("FreshNetNS: %v without a network namespace, %v with a new one", FreshNetNS(h), FreshNetNS(s))
	}
	joined := baseSpec()
	joined.Linux.Namespaces = append(joined.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: "/var/run/netns/x"})
	if !OwnNetNS(joined) || FreshNetNS(joined) {
		t.Fatalf("a joined network namespace: OwnNetNS %v, FreshNetNS %v; want true, false", OwnNetNS(joined), FreshNetNS(joined))
	}
	for _, tc := range []struct{ anno, want string }{{"", "host"}, {"sandbox", "host"}, {"none", "none"}, {"nat", "nat"}, {"host", "host"}} {
		h.Annotations = map[string]string{}
		if tc.anno != "" {
			h.Annotations[api.AnnotationNetwork] = tc.anno
		}
		if m, err := NetworkMode(h, c); err != nil || m != tc.want {
			t.Errorf("host network namespace, annotation %q: %q, %v; want %q", tc.anno, m, err, tc.want)
		}
	}
}

func TestPrepareNAT(t *testing.T) {
	bundle, sockDir := t.TempDir(), t.TempDir()
	if err := os.Chown(sockDir, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	s := baseSpec()
	s.Mounts = []specs.Mount{{Destination: "/etc/resolv.conf", Source: "/etc/resolv.conf", Type: "bind"}}
	s.Annotations = map[string]string{api.AnnotationNAT: `{"ports":["unix:` + sockDir + `/ep.sock:2375"],"bandwidth":4096}`}
	cfg := config.NAT{Ports: []string{"8080:80"}, DNS: []string{"127.0.0.1:53"}, Egress: config.Egress{Default: "deny"}, MaxConnections: 9, Bandwidth: "1M"}
	n, err := PrepareNAT(s, cfg, bundle)
	if err != nil {
		t.Fatal(err)
	}
	// The annotation's ports replace the config's; the rest stays.
	if len(n.Ports) != 1 || n.DNS[0] != "127.0.0.1:53" || n.Egress.Default != "deny" || n.MaxConnections != 9 || n.Bandwidth != 4096 {
		t.Errorf("merged NAT %+v", n)
	}
	if len(n.Owner) != 1 || n.Owner[0] != (api.Owner{Path: sockDir + "/ep.sock", UID: 1234, GID: 5678}) {
		t.Errorf("owners %+v, want the socket directory's owner", n.Owner)
	}
	back, err := api.DecodeNAT(s.Annotations[api.AnnotationNAT])
	if err != nil || len(back.Owner) != 1 {
		t.Errorf("annotation written back: %+v, %v", back, err)
	}
	var resolv []specs.Mount
	for _, m := range s.Mounts {
		if m.Destination == "/etc/resolv.conf" {
			resolv = append(resolv, m)
		}
	}
	if len(resolv) != 1 || resolv[0].Source != filepath.Join(bundle, ResolvConfFile) {
		t.Errorf("resolv.conf mounts %+v, want only the bundle's", resolv)
	}
	if data, _ := os.ReadFile(filepath.Join(bundle, ResolvConfFile)); string(data) != "nameserver 10.0.2.3\n" {
		t.Errorf("resolv.conf %q", data)
	}
	// A narrowing alone narrows the config's policy; a policy of the
	// task's replaces it.
	cfg.Egress.Allow = []string{"10.0.2.2:5000"}
	for ann, want := range map[string]string{
		`{"egress":{"narrow":{"default":"deny","allow":["1.1.1.1"]}}}`:     `{"default":"deny","allow":["10.0.2.2:5000"],"narrow":{"default":"deny","allow":["1.1.1.1"]}}`,
		`{"egress":{"allow":["8.8.8.8"],"narrow":{"deny":["1.0.0.0/8"]}}}`: `{"allow":["8.8.8.8"],"narrow":{"deny":["1.0.0.0/8"]}}`,
	} {
		s := baseSpec()
		s.Annotations = map[string]string{api.AnnotationNAT: ann}
		n, err := PrepareNAT(s, cfg, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := json.Marshal(n.Egress); string(got) != want {
			t.Errorf("PrepareNAT(%s): egress %s, want %s", ann, got, want)
		}
	}
	for ann, why := range map[string]string{
		`{"egress":{"narrow":{"default":"no"}}}`:                      "egress.narrow.default",
		`{"ports":["unix:/nonexistent-gvx/x.sock:80"]}`:               "create it first",
		`{"ports":["unix:` + bundle + `/` + ResolvConfFile + `:80"]}`: "already exists",
		`{"egress":{"allow":["bad rule!"]}}`:                          "egress rule",
		`{"max_connections":-2}`:                                      "max_connections",
	} {
		s := baseSpec()
		s.Annotations = map[string]string{api.AnnotationNAT: ann}
		if _, err := PrepareNAT(s, config.NAT{}, t.TempDir()); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("PrepareNAT(%s) = %v, want an error saying %q", ann, err, why)
		}
	}
}

func TestValidateSysctls(t *testing.T) {
	for _, tc := range []struct {
		sysctls map[string]string
		bad     string
	}{
		{nil, ""},
		{map[string]string{"net.ipv4.ip_unprivileged_port_start": "0", "net.ipv4.ping_group_range": "0 2147483647", "fs.nr_open": "2048"}, ""},
		{map[string]string{"kernel.shm_rmid_forced": "1", "net.ipv4.ping_group_range": "0 1"}, "kernel.shm_rmid_forced=1"},
		{map[string]string{"fs.mqueue.msg_max": "100"}, "fs.mqueue.msg_max=100"},
	} {
		err := validateSysctls(tc.sysctls)
		if tc.bad == "" && err != nil || tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad) || !strings.Contains(err.Error(), "runc")) {
			t.Errorf("sysctls %v: %v, want refusal of %q", tc.sysctls, err, tc.bad)
		}
	}
}

// TestEnableDockerDropsSeccomp: a docker-mode task runs without the outer
// runtime's seccomp profile (docker's default refuses what dockerd does);
// its capabilities are all there and no_new_privs off.
func TestEnableDockerDropsSeccomp(t *testing.T) {
	s := specs.Spec{Process: &specs.Process{NoNewPrivileges: true}, Root: &specs.Root{Readonly: true},
		Linux: &specs.Linux{Seccomp: &specs.LinuxSeccomp{DefaultAction: specs.ActErrno}}}
	EnableDocker(&s, "/run/gvx/docker/default/t")
	if s.Linux.Seccomp != nil {
		t.Errorf("seccomp kept: %+v", s.Linux.Seccomp)
	}
	if s.Process.NoNewPrivileges || s.Root.Readonly || len(s.Process.Capabilities.Effective) != len(allCaps) {
		t.Errorf("docker mode: %+v, root %+v", s.Process, s.Root)
	}
}

// TestDockerRelay: proxied docker mode puts gvx-relay, bind-mounted
// read-only, in front of the init, relaying the forwarded port to the one
// dockerd is told to listen on.
func TestDockerRelay(t *testing.T) {
	s := specs.Spec{Process: &specs.Process{Args: []string{"/usr/local/bin/gvx-dind", "x"}}}
	EnableDocker(&s, "")
	DockerRelay(&s, "/opt/gvx/bin/gvx-relay", false)
	want := []string{DockerRelayGuest, "127.0.0.1:2375", "127.0.0.1:2374", "--", "/usr/local/bin/gvx-dind", "x"}
	if !slices.Equal(s.Process.Args, want) {
		t.Errorf("args %q, want %q", s.Process.Args, want)
	}
	// On the NAT: every address, the NAT's connections alone.
	n := specs.Spec{Process: &specs.Process{Args: []string{"/init"}}}
	DockerRelay(&n, "/opt/gvx/bin/gvx-relay", true)
	if want := []string{DockerRelayGuest, "-peer", "10.0.2.2", "0.0.0.0:2375", "127.0.0.1:2374", "--", "/init"}; !slices.Equal(n.Process.Args, want) {
		t.Errorf("NAT args %q, want %q", n.Process.Args, want)
	}
	if !slices.Contains(s.Process.Env, DockerTCPEnv+"=127.0.0.1:2374") {
		t.Errorf("env %q lacks %s for dockerd's port", s.Process.Env, DockerTCPEnv)
	}
	m := s.Mounts[len(s.Mounts)-1]
	if m.Destination != DockerRelayGuest || m.Source != "/opt/gvx/bin/gvx-relay" || !slices.Contains(m.Options, "ro") {
		t.Errorf("relay mount %+v", m)
	}
}
