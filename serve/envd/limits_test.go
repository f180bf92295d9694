package envd

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/gvxrun/gvx/serve/internal/fakebackend"
)

// TestWatchersCapped: a client creating watchers without end gets
// ResourceExhausted past MaxWatchers (polled watchers and WatchDir streams
// count together), and one more once it removes one.
func TestWatchersCapped(t *testing.T) {
	hs := newServer(t)
	dir := t.TempDir()
	var ids []string
	for i := 0; i < MaxWatchers; i++ {
		var cw CreateWatcherResponse
		if c := unary(t, hs, "filesystem.Filesystem/CreateWatcher", WatchDirRequest{Path: dir}, &cw); c != 200 || cw.WatcherID == "" {
			t.Fatalf("watcher %d: %d %+v", i, c, cw)
		}
		ids = append(ids, cw.WatcherID)
	}
	var refused map[string]string
	if c := unary(t, hs, "filesystem.Filesystem/CreateWatcher", WatchDirRequest{Path: dir}, &refused); c != http.StatusTooManyRequests ||
		refused["code"] != "resource_exhausted" || !strings.Contains(refused["message"], "RemoveWatcher") {
		t.Fatalf("watcher %d: %d %v, want resource_exhausted naming the fix", MaxWatchers+1, c, refused)
	}
	// A WatchDir stream counts too.
	if _, es := stream(t, hs, "filesystem.Filesystem/WatchDir", WatchDirRequest{Path: dir}, nil); !strings.Contains(es, "resource_exhausted") {
		t.Fatalf("WatchDir past the cap: end-stream %s", es)
	}
	if c := unary(t, hs, "filesystem.Filesystem/RemoveWatcher", WatcherRequest{WatcherID: ids[0]}, nil); c != 200 {
		t.Fatalf("RemoveWatcher: %d", c)
	}
	// Removing twice frees one place, not two.
	unary(t, hs, "filesystem.Filesystem/RemoveWatcher", WatcherRequest{WatcherID: ids[0]}, nil)
	var cw CreateWatcherResponse
	if c := unary(t, hs, "filesystem.Filesystem/CreateWatcher", WatchDirRequest{Path: dir}, &cw); c != 200 {
		t.Fatalf("a watcher after one was removed: %d", c)
	}
	if c := unary(t, hs, "filesystem.Filesystem/CreateWatcher", WatchDirRequest{Path: dir}, &refused); c != http.StatusTooManyRequests {
		t.Fatalf("after a double remove: %d, want the cap to hold", c)
	}
}

// TestSlowClientDropped: a process writing 256 MiB to a client that reads
// nothing meanwhile: the service queues at most MaxQueuedOutput for it and
// then ends its stream with ResourceExhausted.
func TestSlowClientDropped(t *testing.T) {
	hs := newServer(t)
	b, _ := json.Marshal(bash("head -c 268435456 /dev/zero; echo finished >&2"))
	var body bytes.Buffer
	body.WriteByte(0)
	_ = binary.Write(&body, binary.BigEndian, uint32(len(b)))
	body.Write(b)
	hr, _ := http.NewRequest("POST", hs.URL+"/process.Process/Start", &body)
	hr.Header.Set("Content-Type", "application/connect+json")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	time.Sleep(3 * time.Second) // the process writes while nobody reads
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("resource_exhausted")) || !bytes.Contains(data, []byte("fell more than")) {
		t.Fatalf("a client that did not read: %d bytes, tail %q; want the stream ended with resource_exhausted", len(data), data[max(0, len(data)-300):])
	}
	// What reached the client is what the socket buffers held plus at
	// most MaxQueuedOutput (base64 in JSON: 4/3).
	if len(data) > MaxQueuedOutput*4/3+64<<20 {
		t.Errorf("the client got %d MiB of a 256 MiB output before it was dropped", len(data)>>20)
	}
	t.Logf("slow client got %d MiB before it was dropped", len(data)>>20)
}

// TestStartOverMaxExecs: a sandbox refusing more execs (the shim's
// max_execs) answers Start with resource_exhausted, not internal.
func TestStartOverMaxExecs(t *testing.T) {
	b := fakebackend.New()
	b.FailExec = fmt.Errorf("exec x: the task has 32 execs alive, the most [resources] max_execs allows: %w", errdefs.ErrResourceExhausted)
	hs := newServerOn(t, b)
	_, es := stream(t, hs, "process.Process/Start", bash("true"), nil)
	if !strings.Contains(es, "resource_exhausted") || !strings.Contains(es, "max_execs") {
		t.Fatalf("end-stream %s, want resource_exhausted naming max_execs", es)
	}
}
