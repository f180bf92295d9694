package hostbind

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func userSpec(mounts ...specs.Mount) *specs.Spec {
	return &specs.Spec{
		Linux:  &specs.Linux{UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}},
		Mounts: mounts,
	}
}

// TestPlanIDMap: a bind of a source owned outside the sandbox's host range
// is cloned and idmapped at a staging point (the spec points there); one
// owned inside it, a volume's staging point, a non-bind mount and a
// mount that asks for its own idmap are left as they are.
func TestPlanIDMap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	root := t.TempDir()
	own := filepath.Join(root, "own")
	mine := filepath.Join(root, "mine")
	vol := filepath.Join(root, "vol")
	file := filepath.Join(root, "file")
	link := filepath.Join(root, "link")
	for _, d := range []string{own, mine, vol} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(mine, 100005, 100005); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(own, link); err != nil {
		t.Fatal(err)
	}
	bind := func(dst, src string, opts ...string) specs.Mount {
		return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: append([]string{"rbind"}, opts...)}
	}
	s := userSpec(
		specs.Mount{Destination: "/proc", Type: "proc", Source: "proc"},
		bind("/own", own, "rw"),
		bind("/mine", mine, "rw"),
		bind("/vol", vol, "rw"),
		bind("/file", file, "ro"),
		bind("/link", link, "rw"),
		specs.Mount{Destination: "/idm", Type: "bind", Source: own, Options: []string{"rbind"},
			UIDMappings: []specs.LinuxIDMapping{{HostID: 1, Size: 1}}, GIDMappings: []specs.LinuxIDMapping{{HostID: 1, Size: 1}}},
	)
	dir := filepath.Join(root, "staging")
	binds, err := Plan(s, dir, []string{vol})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Bind{
		"/own":  {Index: 1, Source: own, Staging: filepath.Join(dir, "0"), Dir: true, Recursive: true, IDMap: true},
		"/file": {Index: 4, Source: file, Staging: filepath.Join(dir, "1"), Recursive: true, IDMap: true},
		"/link": {Index: 5, Source: own, Staging: filepath.Join(dir, "2"), Dir: true, Recursive: true, IDMap: true},
	}
	if len(binds) != len(want) {
		t.Fatalf("binds %+v, want %d", binds, len(want))
	}
	for _, b := range binds {
		m := s.Mounts[b.Index]
		if w := want[m.Destination]; b != w {
			t.Errorf("bind of %s: %+v, want %+v", m.Destination, b, w)
		}
		if m.Source != b.Staging {
			t.Errorf("mount %s: source %s, want the staging point %s", m.Destination, m.Source, b.Staging)
		}
	}
	for i, src := range map[int]string{2: mine, 3: vol, 6: own} {
		if s.Mounts[i].Source != src {
			t.Errorf("mount %s: source %s, want %s as it was", s.Mounts[i].Destination, s.Mounts[i].Source, src)
		}
	}
	// Without a user namespace nothing is idmapped.
	s = &specs.Spec{Mounts: []specs.Mount{bind("/own", own, "rw")}}
	if binds, err := Plan(s, dir, nil); err != nil || len(binds) != 0 {
		t.Errorf("no user namespace: binds %+v, %v", binds, err)
	}
}

// TestPlanRRO: an rro bind is cloned even when its source needs no idmap,
// and gVisor is told ro (it ignores rro); an rro mount whose source is
// missing is an error, not a writable mount.
func TestPlanRRO(t *testing.T) {
	src := t.TempDir()
	s := &specs.Spec{Mounts: []specs.Mount{{Destination: "/mnt", Type: "bind", Source: src, Options: []string{"rbind", "rprivate", "rro"}}}}
	binds, err := Plan(s, "/staging", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(binds) != 1 || !binds[0].RRO || binds[0].IDMap || !binds[0].Recursive {
		t.Fatalf("binds %+v, want one recursively read-only clone", binds)
	}
	if o := s.Mounts[0].Options; slices.Contains(o, "rro") || !slices.Contains(o, "ro") || !slices.Contains(o, "rprivate") {
		t.Errorf("options %q, want ro for gVisor and the propagation kept", o)
	}
	s = &specs.Spec{Mounts: []specs.Mount{{Destination: "/mnt", Type: "bind", Source: filepath.Join(src, "missing"), Options: []string{"rbind", "rro"}}}}
	if _, err := Plan(s, "/staging", nil); err == nil {
		t.Error("rro mount of a missing source: no error")
	}
}

// TestSubmounts: a read-only rbind lists its source's top submounts (not
// those below another one, nor mounts beside it) as mounts of their own,
// with the host mount's read-only flag and the bind's propagation.
func TestSubmounts(t *testing.T) {
	mounts := []mountInfo{
		{point: "/"},
		{point: "/src"},
		{point: "/src/tmpfs"},
		{point: "/src/tmpfs/inner"},
		{point: "/src/ro", readOnly: true},
		{point: "/srcother"},
		{point: "/src/a b"},
	}
	m := specs.Mount{Destination: "/mnt", Source: "/src", Options: []string{"rbind", "ro", "rslave"}}
	got := submounts(m, "/src", mounts)
	want := []specs.Mount{
		{Destination: "/mnt/tmpfs", Type: "bind", Source: "/src/tmpfs", Options: []string{"rbind", "rw", "rslave"}},
		{Destination: "/mnt/ro", Type: "bind", Source: "/src/ro", Options: []string{"rbind", "ro", "rslave"}},
		{Destination: "/mnt/a b", Type: "bind", Source: "/src/a b", Options: []string{"rbind", "rw", "rslave"}},
	}
	if len(got) != len(want) {
		t.Fatalf("submounts %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Destination != want[i].Destination || got[i].Source != want[i].Source || !slices.Equal(got[i].Options, want[i].Options) {
			t.Errorf("submount %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseMountInfo(t *testing.T) {
	mi, ok := parseMountInfo(`36 35 98:0 / /mnt/a\040b rw,noatime master:1 - ext3 /dev/root rw`)
	if !ok || mi.id != 36 || mi.point != "/mnt/a b" || mi.readOnly || !mi.propagates {
		t.Errorf("parsed %+v %v", mi, ok)
	}
	mi, ok = parseMountInfo(`37 35 0:5 / /ro ro,nosuid - tmpfs none rw`)
	if !ok || mi.point != "/ro" || !mi.readOnly || mi.propagates {
		t.Errorf("parsed %+v %v", mi, ok)
	}
	if _, ok := parseMountInfo("short line"); ok {
		t.Error("short line parsed")
	}
}
