package argv

import (
	"reflect"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		argv          []string
		globals, rest []string
		sub           string
		ok            bool
	}{
		{[]string{"gvx-sentry", "--root", "/r", "--debug", "create", "--bundle", "b", "c1"}, []string{"gvx-sentry", "--root", "/r", "--debug"}, []string{"--bundle", "b", "c1"}, "create", true},
		{[]string{"gvx-sentry", "--root=/r", "start", "c1"}, []string{"gvx-sentry", "--root=/r"}, []string{"c1"}, "start", true},
		{[]string{"gvx-sentry", "exec", "--detach", "c1"}, []string{"gvx-sentry"}, []string{"--detach", "c1"}, "exec", true},
		{[]string{"gvx-sentry", "--root", "/r"}, nil, nil, "", false},
		{[]string{"gvx-sentry", "--no-such-flag", "start"}, nil, nil, "", false},
	} {
		g, sub, rest, ok := Split(tc.argv)
		if ok != tc.ok || sub != tc.sub || !reflect.DeepEqual(g, tc.globals) || !reflect.DeepEqual(rest, tc.rest) {
			t.Errorf("Split(%q) = %q %q %q %v, want %q %q %q %v", tc.argv, g, sub, rest, ok, tc.globals, tc.sub, tc.rest, tc.ok)
		}
	}
	if r := Global([]string{"gvx-sentry", "--root", "/r", "kill", "c1"}, "root"); r != "/r" {
		t.Errorf("Global root = %q", r)
	}
}
