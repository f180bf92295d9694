package oci

import (
	"context"
	"encoding/json"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/config"
)

// FuzzPrepare: any spec a client hands containerd either is refused with
// an error or comes out of Prepare in a user namespace whose single
// mapping never reaches host id 0 and never wraps around, with docker mode
// and the volume mounts decided without a panic.
func FuzzPrepare(f *testing.F) {
	seeds := []string{
		`{"root":{"path":"rootfs"},"process":{"args":["sh"],"cwd":"/"},"linux":{}}`,
		`{"root":{"path":"rootfs"},"process":{"args":["sh"],"cwd":"/"},"linux":{"namespaces":[{"type":"user"}],"uidMappings":[{"containerID":0,"hostID":200000,"size":65536}],"gidMappings":[{"containerID":0,"hostID":200000,"size":65536}]}}`,
		`{"root":{"path":"rootfs"},"process":{"args":["sh"],"cwd":"/"},"linux":{"namespaces":[{"type":"user"}],"uidMappings":[{"containerID":0,"hostID":0,"size":1}],"gidMappings":[{"containerID":0,"hostID":0,"size":1}]}}`,
		`{"root":{"path":"rootfs"},"process":{"args":["sh"],"cwd":"/"},"linux":{"namespaces":[{"type":"user","path":"/proc/1/ns/user"}]}}`,
		`{"root":{"path":"rootfs"},"process":{"args":["dockerd"],"cwd":"/","rlimits":[{"type":"RLIMIT_NOFILE","hard":1024,"soft":1024}]},"annotations":{"dev.gvx.docker":"true"},"linux":{"resources":{"memory":{"limit":268435456},"cpu":{"quota":50000,"period":100000,"shares":512},"pids":{"limit":100}}}}`,
		`{"root":{"path":"rootfs"},"process":{"args":["sh"],"cwd":"/"},"mounts":[{"destination":"/data","type":"ext4","source":"/v/a.ext4","options":["ro"]},{"destination":"/x","type":"ext4","source":"rel.ext4"}],"linux":{}}`,
		`{"root":{"path":"rootfs"},"process":{"args":["sh"],"cwd":"rel"},"linux":{}}`,
		`{"annotations":{"dev.gvx.docker":"maybe"}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	cfg := config.Default()
	f.Fuzz(func(t *testing.T, data []byte) {
		var s specs.Spec
		if json.Unmarshal(data, &s) != nil {
			return
		}
		_, _ = PodRole(&s)
		docker, _, derr := DockerRequested(&s)
		m, err := Prepare(&s, cfg)
		if err != nil {
			return
		}
		if m.HostUID == 0 || m.HostGID == 0 || m.Size == 0 ||
			uint64(m.HostUID)+uint64(m.Size) > 1<<32 || uint64(m.HostGID)+uint64(m.Size) > 1<<32 {
			t.Fatalf("Prepare accepted mapping %+v of %s", m, data)
		}
		if len(s.Linux.UIDMappings) != 1 || s.Linux.UIDMappings[0].HostID != m.HostUID || s.Linux.GIDMappings[0].HostID != m.HostGID {
			t.Fatalf("spec mappings %+v/%+v differ from the mapping in force %+v", s.Linux.UIDMappings, s.Linux.GIDMappings, m)
		}
		userns := 0
		for _, ns := range s.Linux.Namespaces {
			if ns.Type == specs.UserNamespace {
				userns++
			}
		}
		if userns == 0 {
			t.Fatalf("Prepare left no user namespace in %s", data)
		}
		_ = SandboxResources(s.Linux.Resources)
		_ = m.IDMapOptions()
		for _, mnt := range s.Mounts {
			if mnt.Type != "ext4" { // bind mounts stat host paths: not fuzzed here
				continue
			}
			if _, _, err := VolumeMount(context.Background(), mnt); err != nil && mnt.Source != "" && mnt.Source[0] == '/' {
				t.Fatalf("VolumeMount refused an absolute ext4 source: %v", err)
			}
		}
		if derr == nil && docker {
			EnableDocker(&s, "/run/gvx/docker/default/t")
		}
		AddCreateRuntimeHook(&s, "/usr/bin/gvx-hook", "--loopback")
		if _, err := json.Marshal(&s); err != nil {
			t.Fatalf("the rewritten spec does not encode: %v", err)
		}
	})
}
