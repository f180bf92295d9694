package exectask

import (
	"fmt"

	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/sentry/exectask/record"
)

// sandbox loads the running sandbox (root container) of task r.
func sandbox(root string, r *record.Record) (*container.Container, error) {
	c, err := container.Load(root, container.FullID{SandboxID: r.Sandbox, ContainerID: r.Sandbox}, container.LoadOpts{SkipCheck: true})
	if err != nil {
		return nil, fmt.Errorf("sandbox %s of task %s: %w", r.Sandbox, r.ID, err)
	}
	return c, nil
}
