package integration

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
)

// TestSecurityPoolAnnotations: a task whose spec names another episode's
// sandbox in gvx's own pool annotations — to start its process in that
// sandbox (dev.gvx.pool-exec) or to have its delete destroy it
// (dev.gvx.pool-sandbox) — or the host's network namespace as its pod's
// (dev.gvx.pod-netns: gvx-sentry would move the host's interfaces into
// it) is refused before anything is set up, naming the annotation; the
// other sandbox's files and process are intact, and so are the host's
// addresses.
func TestSecurityPoolAnnotations(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	c := startCanary(t, "sec-pa-canary")
	addrs0, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range []string{api.AnnotationPoolExec, api.AnnotationPoolSandbox, api.AnnotationPodNetns} {
		id := "sec-pa" + string(rune('a'+i))
		cleanupTask(t, id)
		target := c.id
		if a == api.AnnotationPodNetns {
			target = "/proc/1/ns/net"
		}
		r, err := e.ctrResult(context.Background(), "run", "--rm", "--runtime", runtime, "--annotation", a+"="+target,
			busybox, id, "sh", "-c", "echo PWNED > /"+c.marker+"; kill -9 -1; echo ran")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = e.ctrResult(context.Background(), "container", "rm", id)
		if r.code == 0 || strings.Contains(r.stdout, "ran") || !strings.Contains(r.stderr, a) || !strings.Contains(r.stderr, "set by gvx itself") {
			t.Errorf("%s=%s: exit %d %q %q; want it refused naming the annotation", a, target, r.code, r.stdout, r.stderr)
		}
		t.Logf("%s=%s: refused: %s", a, target, strings.TrimSpace(r.stderr))
		c.check(t)
	}
	if addrs1, err := net.InterfaceAddrs(); err != nil || fmt.Sprint(addrs1) != fmt.Sprint(addrs0) {
		t.Errorf("the host's addresses changed: %v → %v (%v)", addrs0, addrs1, err)
	}
}
