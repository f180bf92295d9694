package exectask

import (
	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/exectask/record"
)

// Rewrite returns command line c with the task it names replaced by the
// task's sandbox (the sandbox's root container), for the commands that act
// on the sandbox on the task's behalf; false if c names no recorded task.
func Rewrite(c argv.Command) ([]string, bool) {
	ids := c.Args()
	if len(ids) == 0 {
		return nil, false
	}
	r, err := record.Load(c.Root, ids[0])
	if err != nil {
		return nil, false
	}
	return c.Retarget(r.Sandbox), true
}
