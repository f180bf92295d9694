package sysclass

import (
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestRewrite(t *testing.T) {
	root := t.TempDir()
	netAdmin := &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_CHOWN", "CAP_NET_ADMIN"}}}
	spec := func(p *specs.Process, mounts ...specs.Mount) *specs.Spec {
		return &specs.Spec{Root: &specs.Root{Path: root}, Process: p, Mounts: mounts}
	}
	sysfs := specs.Mount{Destination: "/sys", Type: "sysfs"}
	if Rewrite(spec(netAdmin, sysfs), "/d") {
		t.Errorf("a root filesystem without /sys got /sys/class")
	}
	if err := os.Mkdir(filepath.Join(root, "sys"), 0o755); err != nil {
		t.Fatal(err)
	}
	if Rewrite(spec(&specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_CHOWN"}}}, sysfs), "/d") {
		t.Errorf("a process without CAP_NET_ADMIN got /sys/class")
	}
	s := spec(netAdmin, sysfs)
	if !Rewrite(s, "/d") || s.Mounts[1].Destination != "/sys/class" || s.Mounts[1].Source != "/d" {
		t.Fatalf("mounts %+v", s.Mounts)
	}
	if Rewrite(s, "/d") {
		t.Errorf("a second Rewrite added another mount")
	}
	if Rewrite(spec(netAdmin, specs.Mount{Destination: "/proc", Type: "proc"}), "/d") {
		t.Errorf("a spec without a sysfs got /sys/class")
	}
	if Rewrite(spec(netAdmin, sysfs, specs.Mount{Destination: "/sys/class/net", Type: "tmpfs"}), "/d") {
		t.Errorf("covered a mount of the spec's own")
	}
	dir := filepath.Join(t.TempDir(), "c")
	if err := Make(dir); err != nil {
		t.Fatal(err)
	}
	if err := Make(dir); err != nil {
		t.Fatalf("second Make: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "net")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o555 {
		t.Errorf("net: %v %v", fi, err)
	}
}
