package sandboxctl

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestHostRoot(t *testing.T) {
	s := &specs.Spec{Linux: &specs.Linux{
		UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}},
		GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100001, Size: 65536}},
	}}
	if u, g := HostRoot(s); u != 100000 || g != 100001 {
		t.Errorf("hostRoot = %d:%d", u, g)
	}
	if u, g := HostRoot(&specs.Spec{}); u != 0 || g != 0 {
		t.Errorf("no user namespace: %d:%d", u, g)
	}
}
