package shim

import (
	"context"
	"os"
	"path/filepath"

	eventstypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/core/events"
	"github.com/containerd/containerd/v2/core/runtime"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
)

// oomPublisher is the publisher the runc task service sends its events
// through. Before the exit of a container that its monitor killed for
// exceeding its memory limit inside a running sandbox (the OOM marker in
// its sentry root; see sentry/subcontainer), it publishes the TaskOOM
// event the kernel's OOM killer would have caused: CRI reports such an
// exit as OOMKilled.
type oomPublisher struct {
	shim.Publisher
	task func(id string) *gvxTask
}

// Publish implements events.Publisher.
func (p *oomPublisher) Publish(ctx context.Context, topic string, event events.Event) error {
	if e, ok := event.(*eventstypes.TaskExit); ok && e.ID == e.ContainerID && e.ExitStatus == uint32(api.ExitKilled) {
		if t := p.task(e.ContainerID); t != nil && oomKilled(t.rec) {
			if err := p.Publisher.Publish(ctx, runtime.TaskOOMEventTopic, &eventstypes.TaskOOM{ContainerID: e.ContainerID}); err != nil {
				log.G(ctx).WithError(err).Warnf("gvx shim: publish the OOM of %s", e.ContainerID)
			}
		}
	}
	return p.Publisher.Publish(ctx, topic, event)
}

// oomKilled reports whether the monitor of the task rec describes killed
// it for its memory limit.
func oomKilled(rec *record) bool {
	if rec.RuncRoot == "" {
		return false
	}
	st, err := os.Stat(api.SentryRoot(filepath.Join(rec.RuncRoot, rec.Namespace)).OOMMarker(rec.ID))
	return err == nil && st.Size() > 0
}
