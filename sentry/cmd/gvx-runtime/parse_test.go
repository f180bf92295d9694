package main

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		ok   bool
		want command
	}{
		{[]string{"/x/gvx-sentry", "--root", "/r", "--log", "/b/log.json", "--log-format", "json", "start", "t1"}, true,
			command{globals: []string{"/x/gvx-sentry", "--root", "/r", "--log", "/b/log.json", "--log-format", "json"}, root: "/r", log: "/b/log.json", sub: "start", args: []string{"t1"}}},
		{[]string{"gvx-sentry", "--root=/r", "--debug", "create", "--bundle", "/b", "t1"}, true,
			command{globals: []string{"gvx-sentry", "--root=/r", "--debug"}, root: "/r", sub: "create", args: []string{"--bundle", "/b", "t1"}}},
		{[]string{"gvx-sentry", "--unknown", "x", "start", "t1"}, false, command{}},
		{[]string{"gvx-sentry", "start", "t1"}, false, command{}},  // no root
		{[]string{"gvx-sentry", "--root", "/r"}, false, command{}}, // no subcommand
		{[]string{"gvx-sentry", "--root"}, false, command{}},       // root without value
		// The global flags every gvx-sentry call gets (config.SentryFlagList).
		{[]string{"gvx-sentry", "--platform=systrap", "--network=sandbox", "--overlay2=root:memory", "--oci-seccomp", "--allow-suid", "--root", "/r", "start", "t1"}, true,
			command{globals: []string{"gvx-sentry", "--platform=systrap", "--network=sandbox", "--overlay2=root:memory", "--oci-seccomp", "--allow-suid", "--root", "/r"}, root: "/r", sub: "start", args: []string{"t1"}}},
		{[]string{"gvx-sentry", "--network=none", "--root", "/r", "ps", "t1"}, true,
			command{globals: []string{"gvx-sentry", "--network=none", "--root", "/r"}, root: "/r", sub: "ps", args: []string{"t1"}}},
	} {
		got, ok := parse(tc.argv)
		if ok != tc.ok || (ok && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("parse(%q) = %+v, %v; want %+v, %v", tc.argv, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSubArgs(t *testing.T) {
	valued := map[string]string{"--pid-file": "pid-file", "--process": "process", "--p": "process"}
	bools := map[string]string{"--detach": "detach", "--no-pivot": ""}
	for _, tc := range []struct {
		args  []string
		ok    bool
		flags map[string]string
		pos   []string
	}{
		{[]string{"--detach", "--pid-file", "/p", "--process=/x.json", "t1"}, true,
			map[string]string{"detach": "true", "pid-file": "/p", "process": "/x.json"}, []string{"t1"}},
		{[]string{"-p", "/x.json", "-detach=false", "--no-pivot", "t1"}, true,
			map[string]string{"detach": "false", "process": "/x.json"}, []string{"t1"}},
		{[]string{"--console-socket", "/s", "t1"}, false, nil, nil},
		{[]string{"t1", "--pid-file"}, false, nil, nil},
		{[]string{"t1", "sh", "-c"}, false, nil, nil},
	} {
		flags, pos, ok := subArgs(tc.args, valued, bools)
		if ok != tc.ok || (ok && (!reflect.DeepEqual(flags, tc.flags) || !reflect.DeepEqual(pos, tc.pos))) {
			t.Errorf("subArgs(%q) = %v, %q, %v; want %v, %q, %v", tc.args, flags, pos, ok, tc.flags, tc.pos, tc.ok)
		}
	}
}
