package main

import (
	"os"
	"os/exec"

	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/exectask/record"
)

// create handles `create --bundle B --pid-file P <id>` of a task started
// as a process in a running sandbox.
func (c command) create() (bool, error) {
	flags, ids, ok := subArgs(c.args, map[string]string{"--bundle": "bundle", "--b": "bundle", "--pid-file": "pid-file"},
		map[string]string{"--no-pivot": "", "--no-new-keyring": ""})
	if !ok || len(ids) != 1 || flags["pid-file"] == "" {
		return false, nil // a console socket, preserved fds, …
	}
	id, dir, pidFile := ids[0], bundle.Dir(flags["bundle"]), flags["pid-file"]
	spec, err := bundle.ReadSpec(dir)
	if err != nil || !record.IsTask(spec) || spec.Process == nil || spec.Process.Terminal {
		return false, nil
	}
	m := exec.Command(c.sentry, append(append([]string(nil), c.globals[1:]...), record.MonitorCommand, id)...)
	m.Args[0] = c.globals[0]
	m.Stdin, m.Stdout, m.Stderr = os.Stdin, os.Stdout, os.Stderr
	return true, record.Create(c.root, id, dir, spec, m, pidFile)
}
