package natproc

import (
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
)

func TestRunBadArguments(t *testing.T) {
	good, err := Args(100000, 100000, api.NAT{})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		nil,
		good[:2],
		{"x", good[1], good[2]},
		{good[0], good[1], "{"},
		Command("/run/gvx/sentry/t", good[:2]),
	} {
		err := Run(args)
		if err == nil || !strings.Contains(err.Error(), Usage) {
			t.Errorf("Run(%q) = %v, want an error naming the usage", args, err)
		}
	}
}

func TestRunRefusesRoot(t *testing.T) {
	args, err := Args(0, 0, api.NAT{})
	if err != nil {
		t.Fatal(err)
	}
	if err := Run(Command("/run/gvx/sentry/t", args)); err == nil || !strings.Contains(err.Error(), "host root") {
		t.Fatalf("Run as uid 0 = %v, want a refusal", err)
	}
}
