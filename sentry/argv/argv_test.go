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

func TestArgsAndRetarget(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		ids      []string
		retarget []string // with "sb" for the id
	}{
		{[]string{"exec", "--detach", "--process", "/p.json", "--pid-file", "/pid", "t1"}, []string{"t1"},
			[]string{"exec", "--detach", "--process", "/p.json", "--pid-file", "/pid", "sb"}},
		{[]string{"exec", "t1", "sh", "-c", "t1"}, []string{"t1", "sh", "-c", "t1"}, []string{"exec", "sb", "sh", "-c", "t1"}},
		{[]string{"ps", "--format", "json", "t1"}, []string{"t1"}, []string{"ps", "--format", "json", "sb"}},
		{[]string{"kill", "--all", "t1", "KILL"}, []string{"t1", "KILL"}, []string{"kill", "--all", "sb", "KILL"}},
		{[]string{"delete", "--force", "t1", "t2"}, []string{"t1", "t2"}, []string{"delete", "--force", "sb", "t2"}},
		{[]string{"start", "t1"}, []string{"t1"}, []string{"start", "sb"}},
		{[]string{"kill", "--no-such-flag", "t1"}, nil, nil},
		{[]string{"list"}, nil, nil},
		{[]string{"gofer", "--bundle", "/b"}, nil, nil},
	} {
		c, ok := Parse(append([]string{"gvx-sentry", "--root", "/r"}, tc.args...))
		if !ok {
			t.Fatalf("parse %q", tc.args)
		}
		if got := c.Args(); !reflect.DeepEqual(got, tc.ids) && (len(got) != 0 || len(tc.ids) != 0) {
			t.Errorf("Args(%q) = %q, want %q", tc.args, got, tc.ids)
		}
		var want []string
		if tc.retarget != nil {
			want = append([]string{"gvx-sentry", "--root", "/r"}, tc.retarget...)
		}
		if got := c.Retarget("sb"); !reflect.DeepEqual(got, want) {
			t.Errorf("Retarget(%q) = %q, want %q", tc.args, got, want)
		}
	}
}

func TestSubFlagBool(t *testing.T) {
	c := Command{Sub: "restore", Rest: []string{"--image-path", "/img", "--detach", "--pid-file", "/pid", "c1"}}
	if got := c.SubFlag("detach"); got != "true" {
		t.Errorf("restore --detach: SubFlag(detach) = %q, want true", got)
	}
	c.Rest = []string{"--image-path", "/img", "c1"}
	if got := c.SubFlag("detach"); got != "false" {
		t.Errorf("restore: SubFlag(detach) = %q, want false", got)
	}
}
