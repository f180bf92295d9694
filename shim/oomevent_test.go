package shim

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	eventstypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/core/events"
	"github.com/containerd/containerd/v2/core/runtime"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/gvxrun/gvx/api"
)

// recordingPublisher records the topics published (a fake of the shim's
// publisher to containerd).
type recordingPublisher struct {
	mu     sync.Mutex
	topics []string
}

func (r *recordingPublisher) Publish(_ context.Context, topic string, _ events.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.topics = append(r.topics, topic)
	return nil
}

func (r *recordingPublisher) Close() error { return nil }

// TestOOMEvent: a container its monitor killed for its memory limit gets
// one TaskOOM event, before its exit's — or, when the task is deleted
// before the exit's event is sent (CRI deletes on the exit Wait reports),
// from the delete, and none again with the exit's; a container killed
// otherwise gets none.
func TestOOMEvent(t *testing.T) {
	ctx := namespaces.WithNamespace(context.Background(), "k8s.io")
	exit := &eventstypes.TaskExit{ContainerID: "c1", ID: "c1", ExitStatus: uint32(api.ExitKilled)}
	for _, tc := range []struct {
		name        string
		marker      string
		deleteFirst bool
		want        []string
	}{
		{"exit event first", "usage 2 limit 1\n", false, []string{runtime.TaskOOMEventTopic, runtime.TaskExitEventTopic}},
		{"delete first", "usage 2 limit 1\n", true, []string{runtime.TaskOOMEventTopic, runtime.TaskExitEventTopic}},
		{"killed, not for memory", "", true, []string{runtime.TaskExitEventTopic}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runcRoot := t.TempDir()
			root := api.SentryRoot(filepath.Join(runcRoot, "k8s.io"))
			if err := os.MkdirAll(filepath.Dir(root.OOMMarker("c1")), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(root.OOMMarker("c1"), []byte(tc.marker), 0o644); err != nil {
				t.Fatal(err)
			}
			task := &gvxTask{rec: &record{ID: "c1", Namespace: "k8s.io", RuncRoot: runcRoot}}
			tasks := map[string]*gvxTask{"c1": task}
			rec := &recordingPublisher{}
			p := &oomPublisher{Publisher: rec, task: func(id string) *gvxTask { return tasks[id] }}
			if tc.deleteFirst {
				p.publishOOM(ctx, task) // service.Delete, before the runtime's delete
				delete(tasks, "c1")     // the task is gone…
				_ = os.Remove(root.OOMMarker("c1"))
			}
			if err := p.Publish(ctx, runtime.TaskExitEventTopic, exit); err != nil { // …when its exit's event is sent
				t.Fatal(err)
			}
			if got := rec.topics; !slices.Equal(got, tc.want) {
				t.Errorf("published %q, want %q", got, tc.want)
			}
		})
	}
}
