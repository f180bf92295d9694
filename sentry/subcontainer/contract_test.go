package subcontainer

import (
	"os"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/pkg/urpc"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/internal/contractroot"
	"github.com/gvxrun/gvx/sentry/internal/statetest"
)

// TestContract: a container is a sub-container by the CRI annotations the
// shim sets, as contract.json spells them; the pool sandbox it adopted is
// contract.json's pool-sandbox annotation; a container killed before it was
// started exits with contract.json's exit_killed.
func TestContract(t *testing.T) {
	c := contractroot.Load(t)
	pod := func(role string) *specs.Spec {
		return &specs.Spec{Annotations: map[string]string{c.Name("cri_container_type"): role, c.Name("cri_sandbox_id"): "sb"}}
	}
	if !IsSubcontainer(pod(c.Name("cri_role_container"))) || IsSubcontainer(pod(c.Name("cri_role_sandbox"))) {
		t.Errorf("CRI roles %s/%s: not told apart", c.Name("cri_role_container"), c.Name("cri_role_sandbox"))
	}
	spec := &specs.Spec{Annotations: map[string]string{c.Name("annotation_pool_sandbox"): "gvxpool-1"}}
	if got := poolSandbox(spec); got != "gvxpool-1" {
		t.Errorf("poolSandbox = %q, want the %s annotation's gvxpool-1", got, c.Name("annotation_pool_sandbox"))
	}
	root := t.TempDir()
	statetest.Save(t, root, "c1", "sb", os.Getpid(), container.Created, pod(c.Name("cri_role_container")))
	statetest.Save(t, root, "c2", "sb", os.Getpid(), container.Stopped, pod(c.Name("cri_role_container")))
	// Created in a sandbox that died before the start (kill -9 of a pool
	// sandbox): its monitor must not wait for ever.
	statetest.Save(t, root, "c3", "sb3", statetest.DeadPid(t), container.Created, pod(c.Name("cri_role_container")))
	if exit, ok := waiting(root, "c1"); !ok || exit != 0 {
		t.Errorf("created: %d, %v", exit, ok)
	}
	for _, id := range []string{"c2", "c3", "none"} {
		if exit, ok := waiting(root, id); ok || exit != c.ExitKilled {
			t.Errorf("%s: exits %d, %v; contract.json says %d", id, exit, ok, c.ExitKilled)
		}
	}
}

// TestContractOOMMarker: a container with a memory limit gets its OOM
// marker where contract.json's layout puts it (the shim reads it there),
// empty until the monitor kills the container; one without a limit gets
// none.
func TestContractOOMMarker(t *testing.T) {
	c := contractroot.Load(t)
	root := t.TempDir()
	connect := func() (*urpc.Client, error) { return nil, nil }
	limit := int64(15 << 20)
	cont := &container.Container{ID: "t1", Spec: &specs.Spec{Linux: &specs.Linux{Resources: &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}}}}}
	w, err := newOOMWatch(api.SentryRoot(root), cont, connect)
	if err != nil || w == nil || w.limit != limit {
		t.Fatalf("newOOMWatch = %+v, %v", w, err)
	}
	defer w.marker.Close()
	if st, err := os.Stat(contractroot.Path(t, c, root, "oom_marker")); err != nil || st.Size() != 0 {
		t.Errorf("OOM marker at contract.json's oom_marker: %v, %v; want an empty file", st, err)
	}
	if w, err := newOOMWatch(api.SentryRoot(root), &container.Container{ID: "t2", Spec: &specs.Spec{Linux: &specs.Linux{}}}, connect); w != nil || err != nil {
		t.Errorf("no limit: %+v, %v; want no watch", w, err)
	}
}
