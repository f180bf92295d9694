package integration

import (
	"strings"
	"testing"
	"time"
)

// TestCRIContainerOOM: a pod's container that goes over its memory limit
// (critest's "should terminate with exitCode 137 and reason OOMKilled":
// 15 MiB, and dd with a 20 MiB buffer) is killed with exit code 137 and
// the reason OOMKilled — which CRI takes from the TaskOOM event — while
// the pod's sandbox and its other container run on.
func TestCRIContainerOOM(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	pod, podCfg := x.runPod(t, "poom", "gvx")
	other := x.createContainer(t, pod, podCfg, "other", []string{"sleep", "600"}, nil)
	x.must(t, "start", other)
	const limit = 15 << 20
	hog := x.createContainer(t, pod, podCfg, "hog", []string{"sh", "-c", "dd if=/dev/zero of=/dev/null bs=20M"},
		map[string]any{"linux": map[string]any{"resources": map[string]any{"memory_limit_in_bytes": limit, "memory_swap_limit_in_bytes": limit}}})
	t0 := time.Now()
	x.must(t, "start", hog)
	st := x.waitExited(t, hog)
	t.Logf("over its limit: %q after %s", st, time.Since(t0).Round(time.Millisecond))
	if st != "CONTAINER_EXITED 137" {
		t.Errorf("container over its memory limit: %q, want CONTAINER_EXITED 137", st)
	}
	if reason := x.must(t, "inspect", "--output", "go-template", "--template", "{{.status.reason}}", hog); reason != "OOMKilled" {
		t.Errorf("reason %q, want OOMKilled", reason)
	}
	if st := x.must(t, "inspect", "--output", "go-template", "--template", "{{.status.state}}", other); st != "CONTAINER_RUNNING" {
		t.Errorf("the pod's other container: %s, want it running on", st)
	}
	// Under its limit, a container is left alone.
	small := x.createContainer(t, pod, podCfg, "small", []string{"sh", "-c", "dd if=/dev/zero of=/dev/null bs=4M count=200"},
		map[string]any{"linux": map[string]any{"resources": map[string]any{"memory_limit_in_bytes": limit}}})
	x.must(t, "start", small)
	if st := x.waitExited(t, small); st != "CONTAINER_EXITED 0" {
		t.Errorf("container under its memory limit: %q, want CONTAINER_EXITED 0", st)
	}
	if reason := x.must(t, "inspect", "--output", "go-template", "--template", "{{.status.reason}}", small); strings.Contains(reason, "OOM") {
		t.Errorf("container under its limit: reason %q", reason)
	}
	x.must(t, "rmp", "-f", pod)
}
