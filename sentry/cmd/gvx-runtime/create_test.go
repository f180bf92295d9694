package main

import (
	"testing"
)

func TestCreateDefersWhatItDoesNotHandle(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--bundle", dir, "--pid-file", dir + "/pid", "t1"},                                // no spec there: gvx-sentry reports it
		{"--bundle", dir, "--console-socket", "/s.sock", "--pid-file", dir + "/pid", "t1"}, // a terminal
		{"--bundle", dir, "t1"}, // no pid file
		{"--bundle", dir, "--pid-file", dir + "/pid", "t1", "t2"},
	} {
		c := command{globals: []string{"gvx-sentry"}, root: t.TempDir(), sub: "create", args: args, sentry: "/nonexistent/gvx-sentry"}
		if handled, err := fast[c.sub](c); handled || err != nil {
			t.Errorf("create %q: handled %v, err %v; want it left to gvx-sentry", args, handled, err)
		}
	}
}
