package integration

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// countingServer is an HTTP server on the host's 127.0.0.1 that counts
// the connections it accepts (so a test tells a refusal by the NAT's
// policy, which opens no host socket, from one by the server).
type countingServer struct {
	port  int
	conns atomic.Int64
}

func newCountingServer(t *testing.T) *countingServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingServer{port: l.Addr().(*net.TCPAddr).Port}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello from the host") }),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				cs.conns.Add(1)
			}
		},
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return cs
}

// TestServeE2BNetwork: on a template of network "nat", the official e2b
// JS SDK's allowInternetAccess and network.allowOut/denyOut narrow the
// template's egress policy (and open nothing it refuses); an egress proxy
// is refused by name. On a pooled NAT template a plain create is handed a
// hot NAT sandbox, and a narrowed one boots its own.
func TestServeE2BNetwork(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	ok, ok2, off := newCountingServer(t), newCountingServer(t), newCountingServer(t)
	dir := t.TempDir()
	img := filepath.Join(e.images, "e2b-base.tar")
	policy := fmt.Sprintf("network = \"nat\"\n[template.nat.egress]\nallow = [\"10.0.2.2:%d\", \"10.0.2.2:%d\"]\n", ok.port, ok2.port)
	tmpl := fmt.Sprintf("[[template]]\nname = \"net\"\nimage = %q\n%s\n[[template]]\nname = \"netpool\"\nimage = %q\npool_size = 1\n%s", img, policy, img, policy)
	writeServeFiles(t, dir, tmpl)
	s := startGvxServe(t, dir)
	defer func() {
		s.stop(syscall.SIGTERM)
		deadline := time.Now().Add(time.Minute)
		for poolServers(dir) > 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
	}()

	out, err := s.node(t, "e2b/network.mjs", "E2B_TEMPLATE=net",
		fmt.Sprintf("PORT_OK=%d", ok.port), fmt.Sprintf("PORT_OK2=%d", ok2.port), fmt.Sprintf("PORT_OFF=%d", off.port))
	t.Logf("e2b SDK:\n%s", out)
	if err != nil || !strings.Contains(out, "6 passed, 0 failed") {
		t.Fatalf("the e2b SDK's network steps failed: %v\ngvx serve's log:\n%s", err, s.stderr)
	}
	// Reached: the default sandbox and the allowOut one on ok, the
	// allowOut-off one on ok2; every refusal opened no host connection.
	if n1, n2, n3 := ok.conns.Load(), ok2.conns.Load(), off.conns.Load(); n1 != 2 || n2 != 1 || n3 != 0 {
		t.Fatalf("host connections: %d, %d, %d; want 2, 1, 0 (a refusal must open none)", n1, n2, n3)
	}

	// The pooled NAT template.
	type pool struct{ Size, Ready, Hot, HotReady int }
	status := func() pool {
		var got struct {
			Pool *pool `json:"pool"`
		}
		if c := s.call("GET", "/gvx/v1/templates/netpool", s.key, "", &got); c != 200 || got.Pool == nil {
			t.Fatalf("template status: %d %+v", c, got)
		}
		return *got.Pool
	}
	full := func() {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for st := status(); st.Ready < st.Size || st.HotReady < st.Hot || st.Hot != 1; st = status() {
			if time.Now().After(deadline) {
				t.Fatalf("the pool never filled: %+v\n%s", st, s.stderr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	fetch := fmt.Sprintf("{ exec 3<>/dev/tcp/10.0.2.2/%d && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3; } 2>&1", ok.port)
	var made []string
	defer func() {
		for _, id := range made {
			s.call("DELETE", "/sandboxes/"+id, s.key, "", nil)
		}
	}()
	full()
	hot := s.create(s.key, `{"templateID":"netpool"}`)
	made = append(made, hot.SandboxID)
	if st := status(); st.HotReady != 0 {
		t.Errorf("a plain create did not take the hot sandbox (%+v)", st)
	}
	if code, out, err := s.run(hot, fetch); err != nil || code != 0 || !strings.Contains(out, "hello from the host") {
		t.Fatalf("the hot NAT sandbox reaching an allowed host port: %d %q %v", code, out, err)
	}
	full()
	narrowed := s.create(s.key, `{"templateID":"netpool","allow_internet_access":false}`)
	made = append(made, narrowed.SandboxID)
	if st := status(); st.HotReady != 1 {
		t.Errorf("a narrowed create took the hot sandbox (%+v): its NAT has the template's policy", st)
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
