package integration

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeE2BNetwork: on a template of network "nat", the official e2b
// JS SDK's allowInternetAccess and network.allowOut/denyOut narrow the
// template's egress policy (and open nothing it refuses); an egress proxy
// is refused by name; updateNetwork narrows a running sandbox and lifts
// the narrowing; a guest's HTTP server is reached through the service
// (E2b-Sandbox-Id/-Port), a private sandbox's only with its traffic
// token. On a pooled NAT template a plain create and a narrowed
// one are each handed a hot NAT sandbox (the narrowed one's NAT narrowed
// before the hand-over).
func TestServeE2BNetwork(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	ok, ok2, off := startNATHTTP(t, "hello from the host\n"), startNATHTTP(t, "hello from the host\n"), startNATHTTP(t, "hello from the host\n")
	dir := t.TempDir()
	img := filepath.Join(e.images, "e2b-base.tar")
	policy := fmt.Sprintf("network = \"nat\"\n[template.nat.egress]\nallow = [\"10.0.2.2:%d\", \"10.0.2.2:%d\"]\n", ok.port, ok2.port)
	tmpl := fmt.Sprintf("[[template]]\nname = \"net\"\nimage = %q\n%s\n[[template]]\nname = \"netpool\"\nimage = %q\npool_size = 1\n%s\n[[template]]\nname = \"netpy\"\nimage = %q\nnetwork = \"nat\"\n",
		img, policy, img, policy, filepath.Join(e.images, "swebench.tar"))
	writeServeFiles(t, dir, tmpl)
	s := startGvxServe(t, dir)
	defer s.stopWithPools()

	out, err := s.node(t, "e2b/network.mjs", "E2B_TEMPLATE=net", "E2B_PY_TEMPLATE=netpy",
		fmt.Sprintf("PORT_OK=%d", ok.port), fmt.Sprintf("PORT_OK2=%d", ok2.port), fmt.Sprintf("PORT_OFF=%d", off.port))
	t.Logf("e2b SDK:\n%s", out)
	if err != nil || !strings.Contains(out, "8 passed, 0 failed") {
		t.Fatalf("the e2b SDK's network steps failed: %v\ngvx serve's log:\n%s", err, s.stderr)
	}
	// Reached: the default sandbox, the allowOut one and the one whose
	// update was lifted on ok, the allowOut-off one on ok2; every refusal
	// opened no host connection.
	if n1, n2, n3 := ok.conns.Load(), ok2.conns.Load(), off.conns.Load(); n1 != 3 || n2 != 1 || n3 != 0 {
		t.Fatalf("host connections: %d, %d, %d; want 3, 1, 0 (a refusal must open none)", n1, n2, n3)
	}

	// The pooled NAT template.
	fetch := fmt.Sprintf("{ exec 3<>/dev/tcp/10.0.2.2/%d && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3; } 2>&1", ok.port)
	var made []string
	defer func() {
		for _, id := range made {
			s.call("DELETE", "/sandboxes/"+id, s.key, "", nil)
		}
	}()
	s.waitPool("netpool")
	t0 := time.Now()
	hot := s.create(s.key, `{"templateID":"netpool"}`)
	plainTook := time.Since(t0)
	made = append(made, hot.SandboxID)
	if st := s.poolStatus("netpool"); st.HotReady != 0 {
		t.Errorf("a plain create did not take the hot sandbox (%+v)", st)
	}
	if code, out, err := s.run(hot, fetch); err != nil || code != 0 || !strings.Contains(out, "hello from the host") {
		t.Fatalf("the hot NAT sandbox reaching an allowed host port: %d %q %v", code, out, err)
	}
	s.waitPool("netpool")
	t0 = time.Now()
	narrowed := s.create(s.key, `{"templateID":"netpool","allow_internet_access":false}`)
	t.Logf("creates from the hot NAT sandbox: plain %v, narrowed %v", plainTook, time.Since(t0))
	made = append(made, narrowed.SandboxID)
	if st := s.poolStatus("netpool"); st.HotReady != 0 {
		t.Errorf("a narrowed create did not take the hot sandbox (%+v): its NAT is narrowed before the hand-over", st)
	}
	before := ok.conns.Load()
	if code, out, err := s.run(narrowed, fetch); err != nil || code == 0 || !strings.Contains(out, "Connection refused") {
		t.Fatalf("allow_internet_access false on a pooled template: %d %q %v", code, out, err)
	}
	if ok.conns.Load() != before {
		t.Fatalf("the refused flow reached the host's server")
	}
	for _, id := range made {
		if c := s.call("DELETE", "/sandboxes/"+id, s.key, "", nil); c != 204 {
			t.Fatalf("kill %s: %d", id, c)
		}
	}
	made = nil
}
