package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
)

// TestSecurityPoolAnnotations: a task whose spec names another episode's
// sandbox in gvx's own pool annotations — to start its process in that
// sandbox (dev.gvx.pool-exec) or to have its delete destroy it
// (dev.gvx.pool-sandbox) — is refused before anything is set up, naming
// the annotation; the other sandbox's files and process are intact.
func TestSecurityPoolAnnotations(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	c := startCanary(t, "sec-pa-canary")
	for i, a := range []string{api.AnnotationPoolExec, api.AnnotationPoolSandbox} {
		id := "sec-pa" + string(rune('a'+i))
		cleanupTask(t, id)
		r, err := e.ctrResult(context.Background(), "run", "--rm", "--runtime", runtime, "--annotation", a+"="+c.id,
			busybox, id, "sh", "-c", "echo PWNED > /"+c.marker+"; kill -9 -1; echo ran")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = e.ctrResult(context.Background(), "container", "rm", id)
		if r.code == 0 || strings.Contains(r.stdout, "ran") || !strings.Contains(r.stderr, a) || !strings.Contains(r.stderr, "set by gvx itself") {
			t.Errorf("%s=%s: exit %d %q %q; want it refused naming the annotation", a, c.id, r.code, r.stdout, r.stderr)
		}
		t.Logf("%s=%s: refused: %s", a, c.id, strings.TrimSpace(r.stderr))
		c.check(t)
	}
}
