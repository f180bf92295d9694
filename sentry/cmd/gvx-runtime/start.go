package main

import (
	"github.com/gvxrun/gvx/sentry/monitor"
)

// start handles `start <id>` of a container or task whose monitor waits
// on its start socket: the monitor starts it.
func (c command) start() (bool, error) {
	if len(c.args) != 1 || !monitor.Has(c.root, c.args[0]) {
		return false, nil
	}
	return true, monitor.RequestStart(c.root, c.args[0])
}
