package shim

import (
	"context"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/pool/bootspec"
	"github.com/gvxrun/gvx/sandbox"
)

// TestStartUTS: an adopting task's hostname is set in the sandbox only
// when it differs from the pool's (the baseline's, else the boot's), and
// the task's start waits for it and fails with its error (here: a
// sandbox without gvx-pause, which SetUTS refuses).
func TestStartUTS(t *testing.T) {
	baseline := &sandbox.Baseline{Guest: api.GuestState{Hostname: "booted", Domainname: "d"}}
	for _, tc := range []struct {
		name, host, domain string
		baseline           *sandbox.Baseline
		set                bool
	}{
		{"no hostname", "", "", nil, false},
		{"the pool's", bootspec.Hostname, "", nil, false},
		{"the baseline's", "booted", "d", baseline, false},
		{"the baseline's name, another domain", "booted", "other", baseline, true},
		{"a pod's", "pod-1", "", nil, true},
	} {
		task := &gvxTask{spec: &specs.Spec{Hostname: tc.host, Domainname: tc.domain}}
		task.startUTS(context.Background(), &sandbox.Sandbox{ID: "sb1", Baseline: tc.baseline})
		err := task.awaitUTS()
		if set := err != nil; set != tc.set || set && !strings.Contains(err.Error(), "not a pool sandbox") {
			t.Errorf("%s: awaitUTS = %v, want the hostname set: %v", tc.name, err, tc.set)
		}
		if again := task.awaitUTS(); (again != nil) != tc.set {
			t.Errorf("%s: a second awaitUTS = %v, want the first's %v", tc.name, again, err)
		}
	}
	var none *gvxTask
	if err := none.awaitUTS(); err != nil {
		t.Errorf("awaitUTS of no task: %v", err)
	}
}
