package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/monitor"
)

// kill handles `kill <id> [signal]` of a running task started as a process
// in a running sandbox: its monitor signals the process.
func (c command) kill() (bool, error) {
	if len(c.args) == 0 || len(c.args) > 2 || strings.HasPrefix(c.args[0], "-") {
		return false, nil // --all, --pid: gvx-sentry's
	}
	id, name := c.args[0], "TERM"
	if len(c.args) == 2 {
		name = c.args[1]
	}
	sig, err := monitor.ParseSignal(name)
	if err != nil {
		return false, nil
	}
	r, err := record.Load(c.root, id)
	if err != nil || r.Pid == 0 {
		return false, nil // not started: gvx-sentry records the kill
	}
	conn, err := monitor.Dial(c.root, id)
	if err != nil {
		return false, nil
	}
	defer conn.Close()
	if _, err := monitor.Send(conn, monitor.Request{Op: monitor.OpSignal, Pid: r.Pid, Signal: int(sig)}); err != nil {
		if errors.Is(err, monitor.ErrGone) {
			// The monitor exits with the task's process: it is gone. (A
			// monitor that answers says api.NotRunning itself when the
			// process or its sandbox is gone.)
			err = fmt.Errorf("%s: %w", api.NotRunning, err)
		}
		return true, fmt.Errorf("kill task %s: %w", id, err)
	}
	return true, nil
}
