package sandbox

import (
	"errors"
	"os"
	"testing"

	"github.com/gvxrun/gvx/api"
)

// TestVerify: each way a guest (or its Sentry's OOM score) can differ from
// its boot baseline fails the verification with its own reason; the
// baseline itself (and memory within the slack) passes.
func TestVerify(t *testing.T) {
	base := api.GuestState{Hostname: "gvx-pool", Sockets: 1, Mounts: 6, MemUsedKiB: 6000}
	sb := &Sandbox{ID: "gvxpool-x", Pid: os.Getpid(), Baseline: &Baseline{Guest: base}}
	for _, tc := range []struct {
		name   string
		change func(*api.GuestState)
		want   string
	}{
		{"baseline", func(*api.GuestState) {}, ""},
		{"memory within the slack", func(g *api.GuestState) { g.MemUsedKiB += MemSlackKiB }, ""},
		{"fewer sockets", func(g *api.GuestState) { g.Sockets = 0 }, ""},
		{"probe errors", func(g *api.GuestState) { g.Errors = []string{"sethostname: EPERM"} }, ResetProbe},
		{"process left", func(g *api.GuestState) { g.Processes = []string{"7 sleep"} }, ResetProcesses},
		{"hostname", func(g *api.GuestState) { g.Hostname = "dirty" }, ResetHostname},
		{"domainname", func(g *api.GuestState) { g.Domainname = "dirty" }, ResetHostname},
		{"shm", func(g *api.GuestState) { g.ShmPages = 1 }, ResetSysV},
		{"semaphores", func(g *api.GuestState) { g.Semaphores = 1 }, ResetSysV},
		{"queues", func(g *api.GuestState) { g.Queues = 1 }, ResetSysV},
		{"socket", func(g *api.GuestState) { g.Sockets = 2 }, ResetSockets},
		{"mount", func(g *api.GuestState) { g.Mounts = 7 }, ResetMounts},
		{"memory", func(g *api.GuestState) { g.MemUsedKiB += MemSlackKiB + 1 }, ResetMemory},
	} {
		g := base
		tc.change(&g)
		err := sb.Verify(&g)
		var re *ResetError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want it verified", tc.name, err)
		case tc.want != "" && (!errors.As(err, &re) || re.Reason != tc.want):
			t.Errorf("%s: %v, want reason %s", tc.name, err, tc.want)
		}
	}
	// The Sentry's oom_score_adj (this process's here) as at boot.
	own, err := sb.oomScoreAdj()
	if err != nil {
		t.Fatal(err)
	}
	sb.Baseline.OOMScoreAdj = &own
	if err := sb.Verify(&base); err != nil {
		t.Errorf("the boot oom_score_adj: %v", err)
	}
	other := own + 1
	sb.Baseline.OOMScoreAdj = &other
	var re *ResetError
	if err := sb.Verify(&base); !errors.As(err, &re) || re.Reason != ResetOOMScore {
		t.Errorf("another oom_score_adj: %v, want reason %s", err, ResetOOMScore)
	}
	if err := (&Sandbox{ID: "gvxpool-y"}).Verify(&base); err == nil {
		t.Error("a sandbox without a baseline verified")
	}
}
