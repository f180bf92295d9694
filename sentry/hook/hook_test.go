package hook

import (
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
)

func TestRunRejectsBadState(t *testing.T) {
	for _, tc := range []struct{ args, state, want string }{
		{"", "not json", "read OCI state"},
		{"", `{"pid":0}`, "no pid"},
		{"--bogus", `{"pid":1}`, "flag provided but not defined"},
		{api.HookLoopback, `{"pid":2147483646}`, "open network namespace"},
	} {
		var args []string
		if tc.args != "" {
			args = []string{tc.args}
		}
		err := Run(args, strings.NewReader(tc.state))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%q, %q) = %v, want an error containing %q", tc.args, tc.state, err, tc.want)
		}
	}
	if err := Run(nil, strings.NewReader(`{"pid":1}`)); err != nil {
		t.Errorf("no work asked: %v", err)
	}
}
