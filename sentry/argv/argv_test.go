package argv

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Command
		ok   bool
	}{
		{[]string{"gvx-sentry", "--root", "/r", "--debug", "create", "--bundle", "b", "c1"},
			Command{Globals: []string{"gvx-sentry", "--root", "/r", "--debug"}, Sub: "create", Rest: []string{"--bundle", "b", "c1"}, Root: "/r"}, true},
		{[]string{"gvx-sentry", "--root=/r", "start", "c1"},
			Command{Globals: []string{"gvx-sentry", "--root=/r"}, Sub: "start", Rest: []string{"c1"}, Root: "/r"}, true},
		{[]string{"gvx-sentry", "exec", "--detach", "c1"},
			Command{Globals: []string{"gvx-sentry"}, Sub: "exec", Rest: []string{"--detach", "c1"}}, true},
		// The Sentry's own command line, as runsc re-executes itself.
		{[]string{"runsc-sandbox", "--root=/r", "--network=none", "--debug-log-fd=3", "boot", "--bundle=/b", "sb1"},
			Command{Globals: []string{"runsc-sandbox", "--root=/r", "--network=none", "--debug-log-fd=3"}, Sub: "boot", Rest: []string{"--bundle=/b", "sb1"}, Root: "/r"}, true},
		{[]string{"gvx-sentry", "--root", "/r"}, Command{}, false},
		{[]string{"gvx-sentry", "--no-such-flag", "start"}, Command{}, false},
	} {
		got, ok := Parse(tc.args)
		if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q) = %+v %v, want %+v %v", tc.args, got, ok, tc.want, tc.ok)
		}
	}
}
