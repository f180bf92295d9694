package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestHostNetwork: a task on the host's network (`ctr run --net-host`, a
// CRI pod with hostNetwork) uses the host's network stack, as under runc:
// a server it starts on a host port answers the host's 127.0.0.1, and it
// reaches a server on the host's loopback. (Before, gVisor's netstack
// copied the host's interfaces into the sandbox and the task's listeners
// stayed inside it: critest's `portforward in host network` timed out.)
func TestHostNetwork(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	ctx := context.Background()
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "from-host-loopback")
	}))
	defer host.Close()

	t.Run("ctr", func(t *testing.T) {
		port := freePort(t)
		id := "hostnet1"
		cleanupTask(t, id)
		mustCtr(t, "run", "-d", "--net-host", "--runtime", runtime, busybox, id, "sh", "-c",
			fmt.Sprintf("mkdir /www && echo served-on-host-net > /www/index.html && exec httpd -f -p 127.0.0.1:%d -h /www", port))
		body, err := httpGetRetry(ctx, fmt.Sprintf("http://127.0.0.1:%d/", port), 20*time.Second)
		if err != nil || strings.TrimSpace(body) != "served-on-host-net" {
			t.Errorf("GET the task's server on the host's 127.0.0.1:%d: %q, %v", port, body, err)
		}
		out := mustCtr(t, "task", "exec", "--exec-id", "get", id, "wget", "-qO-", host.URL)
		if strings.TrimSpace(out) != "from-host-loopback" {
			t.Errorf("the task's GET of the host's %s: %q", host.URL, out)
		}
	})

	t.Run("cri", func(t *testing.T) {
		x := newCRIEnv(t)
		port := freePort(t)
		cfg := x.writeJSON(t, "hostnet.json", map[string]any{
			"metadata":      map[string]string{"name": "hostnet", "namespace": "default", "uid": "uid-hostnet"},
			"log_directory": x.dir + "/logs-hostnet",
			"linux": map[string]any{"security_context": map[string]any{
				"namespace_options": map[string]any{"network": 2}, // NODE
			}},
		})
		pod := x.must(t, "runp", "--runtime", "gvx", cfg)
		t.Cleanup(func() { x.run(t, "rmp", "-f", pod) })
		app := x.createContainer(t, pod, cfg, "web", []string{"sh", "-c",
			fmt.Sprintf("mkdir /www && echo pod-on-host-net > /www/index.html && exec httpd -f -p 127.0.0.1:%d -h /www", port)}, nil)
		x.must(t, "start", app)
		body, err := httpGetRetry(ctx, fmt.Sprintf("http://127.0.0.1:%d/", port), 20*time.Second)
		if err != nil || strings.TrimSpace(body) != "pod-on-host-net" {
			t.Errorf("GET the pod's server on the host's 127.0.0.1:%d: %q, %v", port, body, err)
		}
		if out := x.must(t, "exec", app, "wget", "-qO-", host.URL); out != "from-host-loopback" {
			t.Errorf("the pod's GET of the host's %s: %q", host.URL, out)
		}
		x.must(t, "stop", "--timeout", "1", app)
		x.must(t, "rm", app)
		x.stopRemovePod(t, pod)
	})
}
