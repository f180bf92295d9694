package main

import (
	"strings"
	"testing"

	"gvisor.dev/gvisor/runsc/cmd/util"

	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/internal/contractroot"
)

// TestContract: a create whose spec carries contract.json's pool-exec
// annotation is a task's, one with its CRI container role a sub-container's,
// one with its NAT annotation a NAT sandbox's;
// a kill whose container is gone says contract.json's not_running phrase.
func TestContract(t *testing.T) {
	c := contractroot.Load(t)
	for _, tc := range []struct {
		annotations map[string]string
		want        kind
	}{
		{map[string]string{c.Name("annotation_pool_exec"): "gvxpool-1"}, kindTask},
		{map[string]string{c.Name("cri_container_type"): c.Name("cri_role_container"), c.Name("cri_sandbox_id"): "sb"}, kindSubcontainer},
		{map[string]string{c.Name("cri_container_type"): c.Name("cri_role_sandbox"), c.Name("cri_sandbox_id"): "sb"}, kindPlain},
		{map[string]string{c.Name("annotation_nat"): "{}"}, kindNAT},
	} {
		cl, _ := argv.Parse([]string{c.Name("sentry_binary"), "--root", t.TempDir(), "create", "--bundle", writeBundle(t, tc.annotations), "t1"})
		if got := kindOf(cl); got != tc.want {
			t.Errorf("create with %v: kind %v, want %v", tc.annotations, got, tc.want)
		}
	}
	util.ErrorLogger = &verdict{why: func(string) string { return "the sandbox of container t1 is gone" }}
	stderr := captureStderr(t, func() { util.Errorf("sandbox is not running") })
	util.ErrorLogger = nil
	if !strings.Contains(stderr, c.Name("not_running")) {
		t.Errorf("kill of a gone container printed %q, want %q", stderr, c.Name("not_running"))
	}
}
