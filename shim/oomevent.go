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
		if t := p.task(e.ContainerID); t != nil {
			p.publishOOM(ctx, t)
		}
	}
	return p.Publisher.Publish(ctx, topic, event)
}

// publishOOM publishes, once, the TaskOOM event of task t if its monitor
// killed it for its memory limit: before its exit's event, or, when the
// task is deleted before that event is sent (a client that deletes on
// the exit Wait reports, as CRI does, can win the race on a busy host),
// from the delete, before the marker and the task go. containerd's CRI
// takes the reason OOMKilled from this event whenever it comes.
func (p *oomPublisher) publishOOM(ctx context.Context, t *gvxTask) {
	if !oomKilled(t.rec) || !t.oomPublished.CompareAndSwap(false, true) {
		return
	}
	if err := p.Publisher.Publish(ctx, runtime.TaskOOMEventTopic, &eventstypes.TaskOOM{ContainerID: t.rec.ID}); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx shim: publish the OOM of %s", t.rec.ID)
	}
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
