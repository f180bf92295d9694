package main

import (
	"fmt"

	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/monitor"
)

// delete handles `delete [--force] <id>` of a task started as a process in
// a running sandbox whose process has exited (its monitor is gone) or with
// --force: it removes the task's record and socket (the sandbox was the
// task's alone and goes with the shim's release of it: pool.Sandbox.Destroy
// kills it through its cgroup); of a container in a running sandbox once
// its monitor marked it ended (subDelete); and of a sandbox's root
// container whose sandbox has exited (rootGoneDelete). No gvx-sentry
// start-up is needed for any of them.
func (c command) delete() (bool, error) {
	flags, ids, ok := subArgs(c.args, nil, map[string]string{"--force": "force", "--f": "force"})
	if !ok || len(ids) != 1 {
		return false, nil
	}
	id, force := ids[0], flags["force"] == "true"
	if !record.Exists(c.root, id) {
		if handled, err := c.subDelete(id); handled {
			return true, err // a container in a running sandbox, once it ended
		}
		return c.rootGoneDelete(id) // a sandbox's root container, once its sandbox has exited
	}
	if !force {
		if conn, err := monitor.Dial(c.root, id); err == nil {
			conn.Close()
			return false, nil // still running: gvx-sentry refuses it
		}
	}
	if err := record.Remove(c.root, id); err != nil {
		return true, fmt.Errorf("delete task %s: %w", id, err)
	}
	return true, nil
}
