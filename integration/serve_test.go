package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/gvxrun/gvx/integration/harness"
)

// served is a running `gvx serve` on the harness's containerd.
type served struct {
	t      *testing.T
	dir    string // its state directory
	url    string
	key    string
	other  string // a second key
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	client *http.Client // trusts the service's certificate, if it serves HTTPS
}

// serveTLS is what makes gvx serve serve HTTPS: its certificate and key
// files, and a pool that trusts the certificate.
type serveTLS struct {
	cert, key string
	roots     *x509.CertPool
}

// writeServeFiles writes gvx serve's keys file (two new keys, of owners a
// and b) and templates file tmpl into dir, and returns the keys.
func writeServeFiles(t *testing.T, dir, tmpl string) (key, other string) {
	t.Helper()
	key, other = newKey(), newKey()
	if err := os.WriteFile(filepath.Join(dir, "keys"), []byte(key+" a\n"+other+" b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "templates.toml"), []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	return key, other
}

// startGvxServe runs gvx serve with the test templates: base (the e2b base
// image) and swebench (the example's image, one sandbox pooled).
func startGvxServe(t *testing.T, dir string) *served {
	t.Helper()
	return restartGvxServe(t, dir, "")
}

// restartGvxServe runs gvx serve on state directory dir (its templates,
// if it has none yet) listening on addr ("": a free port).
func restartGvxServe(t *testing.T, dir, addr string) *served {
	t.Helper()
	return launchGvxServe(t, dir, addr, nil)
}

// launchGvxServe is restartGvxServe serving HTTPS with tl (nil: HTTP).
func launchGvxServe(t *testing.T, dir, addr string, tl *serveTLS) *served {
	t.Helper()
	s := &served{t: t, dir: dir, client: http.DefaultClient}
	if _, err := os.Stat(filepath.Join(dir, "keys")); os.IsNotExist(err) {
		tmpl := fmt.Sprintf("[[template]]\nname = \"base\"\nimage = %q\n\n[[template]]\nname = \"swebench\"\nimage = %q\n",
			filepath.Join(e.images, "e2b-base.tar"), filepath.Join(e.images, "swebench.tar"))
		s.key, s.other = writeServeFiles(t, dir, tmpl)
	} else {
		b, _ := os.ReadFile(filepath.Join(dir, "keys"))
		f := strings.Fields(string(b))
		s.key, s.other = f[0], f[2]
	}
	if s.addr = addr; s.addr == "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s.addr = l.Addr().String()
		l.Close()
	}
	s.url = "http://" + s.addr
	args := []string{"serve", "--listen", "tcp://" + s.addr,
		"--state-dir", filepath.Join(dir, "state"), "--keys", filepath.Join(dir, "keys"),
		"--templates", filepath.Join(dir, "templates.toml"), "--containerd", e.Socket(),
		"--checkpoint-dir", filepath.Join(dir, "checkpoints")}
	if tl != nil {
		s.url = "https://" + s.addr
		args = append(args, "--tls-cert", tl.cert, "--tls-key", tl.key)
		s.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tl.roots}}}
	}
	s.stderr = &syncBuffer{}
	s.cmd = exec.Command(filepath.Join(e.gvxBin, "gvx"), args...)
	s.cmd.Env = append(os.Environ(), "PATH="+e.path())
	s.cmd.Stdout, s.cmd.Stderr = s.stderr, s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := s.client.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) || s.cmd.ProcessState != nil {
			s.stop(syscall.SIGKILL)
			t.Fatalf("gvx serve did not answer: %v\n%s", err, s.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

func newKey() string {
	b := make([]byte, 20)
	f, _ := os.Open("/dev/urandom")
	_, _ = io.ReadFull(f, b)
	f.Close()
	return fmt.Sprintf("e2b_%x", b)
}

// stop ends gvx serve with sig (SIGTERM: a clean stop; SIGKILL: a crash).
func (s *served) stop(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	_ = s.cmd.Wait()
	s.cmd = nil
	if testing.Verbose() {
		s.t.Logf("gvx serve's log:\n%s", s.stderr)
	}
}

// call sends a control-plane request and decodes the answer into out.
func (s *served) call(method, path, key, body string, out any) int {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

type e2bSandbox struct {
	SandboxID       string `json:"sandboxID"`
	EnvdAccessToken string `json:"envdAccessToken"`
	State           string `json:"state"`
}

type e2bError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (s *served) create(key, body string) e2bSandbox {
	s.t.Helper()
	var sb e2bSandbox
	if c := s.call("POST", "/v2/sandboxes", key, body, &sb); c != 201 {
		s.t.Fatalf("create %s: %d\n%s", body, c, s.stderr)
	}
	return sb
}

// run runs cmd in sandbox sb through envd's process.Process/Start, as the
// SDKs do, and returns its exit code and stdout.
func (s *served) run(sb e2bSandbox, cmd string) (int, string, error) {
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", cmd}}, "stdin": false})
	var body bytes.Buffer
	body.WriteByte(0)
	_ = binary.Write(&body, binary.BigEndian, uint32(len(msg)))
	body.Write(msg)
	req, _ := http.NewRequest("POST", s.url+"/process.Process/Start", &body)
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	req.Header.Set("Connect-Timeout-Ms", "60000")
	resp, err := s.client.Do(req)
	if err != nil {
		return -1, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return -1, "", fmt.Errorf("start: %d %s", resp.StatusCode, b)
	}
	var out strings.Builder
	code := -1
	for {
		var h [5]byte
		if _, err := io.ReadFull(resp.Body, h[:]); err != nil {
			return -1, out.String(), fmt.Errorf("stream: %w", err)
		}
		m := make([]byte, binary.BigEndian.Uint32(h[1:]))
		if _, err := io.ReadFull(resp.Body, m); err != nil {
			return -1, out.String(), err
		}
		if h[0] == 2 {
			if string(m) != "{}" {
				return -1, out.String(), fmt.Errorf("end-stream: %s", m)
			}
			return code, out.String(), nil
		}
		var ev struct {
			Event struct {
				Data *struct{ Stdout string }
				End  *struct{ ExitCode int }
			}
		}
		_ = json.Unmarshal(m, &ev)
		if d := ev.Event.Data; d != nil && d.Stdout != "" {
			b, _ := base64.StdEncoding.DecodeString(d.Stdout)
			out.Write(b)
		}
		if ev.Event.End != nil {
			code = ev.Event.End.ExitCode
		}
	}
}

// stopWithPools stops gvx serve cleanly and waits (up to a minute) for
// its pools' servers to end.
func (s *served) stopWithPools() {
	s.stop(syscall.SIGTERM)
	deadline := time.Now().Add(time.Minute)
	for poolServers(s.dir) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
}

// poolStatus is template name's pool's fill level.
func (s *served) poolStatus(name string) (st struct{ Size, Ready, Hot, HotReady int }) {
	s.t.Helper()
	var got struct {
		Pool *struct{ Size, Ready, Hot, HotReady int } `json:"pool"`
	}
	if c := s.call("GET", "/gvx/v1/templates/"+name, s.key, "", &got); c != 200 || got.Pool == nil {
		s.t.Fatalf("template %s's status: %d %+v", name, c, got)
	}
	return *got.Pool
}

// waitPool waits until template name's pool is full and its one hot
// sandbox ready.
func (s *served) waitPool(name string) {
	s.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for st := s.poolStatus(name); st.Ready < st.Size || st.HotReady < st.Hot || st.Hot != 1; st = s.poolStatus(name) {
		if time.Now().After(deadline) {
			s.t.Fatalf("template %s's pool never filled: %+v\n%s", name, st, s.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// npmModules is the pinned e2b SDK (integration/e2b's lockfile),
// installed once into ~/.cache/gvx/npm.
func npmModules(t *testing.T) string {
	t.Helper()
	mods, err := harness.NPMModules("e2b", "e2b", testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	return mods
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// node runs script (a file of this repository) with the cached SDK and
// the e2b environment pointing at s.
func (s *served) node(t *testing.T, script string, env ...string) (string, error) {
	t.Helper()
	mods := npmModules(t)
	abs, _ := filepath.Abs(script)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", abs)
	cmd.Env = append(os.Environ(), "E2B_API_URL="+s.url, "E2B_SANDBOX_URL="+s.url, "E2B_API_KEY="+s.key,
		"E2B_MODULE="+filepath.Join(mods, "e2b", "dist", "index.mjs"))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestServeE2BSDK drives gvx serve with the official e2b JS SDK.
func TestServeE2BSDK(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	s := startGvxServe(t, t.TempDir())
	defer s.stop(syscall.SIGTERM)
	out, err := s.node(t, "e2b/sdk.mjs")
	t.Logf("e2b SDK:\n%s", out)
	if err != nil {
		t.Fatalf("the e2b SDK's steps failed: %v\ngvx serve's log:\n%s", err, s.stderr)
	}
	if !strings.Contains(out, "13 passed, 0 failed") {
		t.Fatalf("not every step ran:\n%s", out)
	}
	var list []e2bSandbox
	if c := s.call("GET", "/v2/sandboxes", s.key, "", &list); c != 200 || len(list) != 0 {
		t.Fatalf("sandboxes left: %d %v", c, list)
	}
}

// TestServeE2BPTY drives a terminal through the e2b JS SDK's sbx.pty.
func TestServeE2BPTY(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	s := startGvxServe(t, t.TempDir())
	defer s.stop(syscall.SIGTERM)
	out, err := s.node(t, "e2b/pty.mjs")
	t.Logf("e2b SDK:\n%s", out)
	if err != nil || !strings.Contains(out, "1 passed, 0 failed") {
		t.Fatalf("the e2b SDK's terminal failed: %v\ngvx serve's log:\n%s", err, s.stderr)
	}
}

// TestServeService: expiry, key isolation, bad input, concurrency.
func TestServeService(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	s := startGvxServe(t, t.TempDir())
	defer s.stop(syscall.SIGTERM)

	// TTL: a sandbox with a 2 s timeout is gone a little after.
	short := s.create(s.key, `{"templateID":"base","timeout":2}`)
	t0 := time.Now()
	for s.call("GET", "/sandboxes/"+short.SandboxID, s.key, "", nil) == 200 {
		if time.Since(t0) > 15*time.Second {
			t.Fatal("sandbox still there 15 s after its 2 s timeout")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("a 2 s sandbox was removed %v after create returned", time.Since(t0).Round(10*time.Millisecond))

	sb := s.create(s.key, `{"templateID":"base","metadata":{"who":"a"}}`)
	// Key isolation: the other key sees nothing of it.
	var e2 e2bError
	if c := s.call("GET", "/sandboxes/"+sb.SandboxID, s.other, "", &e2); c != 404 || e2.Code != 404 {
		t.Fatalf("foreign get: %d %+v", c, e2)
	}
	if c := s.call("DELETE", "/sandboxes/"+sb.SandboxID, s.other, "", &e2); c != 404 {
		t.Fatalf("foreign kill: %d", c)
	}
	var list []e2bSandbox
	if s.call("GET", "/v2/sandboxes", s.other, "", &list); len(list) != 0 {
		t.Fatalf("foreign list: %v", list)
	}
	// Bad input: each a 4xx naming the problem; the service keeps serving.
	for _, c := range []struct {
		method, path, key, body string
		status                  int
		says                    string
	}{
		{"POST", "/v2/sandboxes", s.key, `{"templateID":"nosuch"}`, 404, "template 'nosuch' not found"},
		{"POST", "/v2/sandboxes", s.key, `{"templateID":"base"`, 400, "malformed JSON"},
		{"POST", "/v2/sandboxes", s.key, `{"templateID":"base","metadata":{"x":"` + strings.Repeat("y", 2<<20) + `"}}`, 413, "request body over"},
		{"GET", "/v2/sandboxes", "e2b_0123456789abcdef0123", "", 401, "API key"},
		{"GET", "/v2/sandboxes", "", "", 401, "API key"},
		{"POST", "/sandboxes/" + sb.SandboxID + "/pause", s.other, "", 404, "not found"},
		{"POST", "/sandboxes/" + sb.SandboxID + "/timeout", s.key, `{"timeout":"soon"}`, 400, "malformed JSON"},
		{"POST", "/gvx/v1/sandboxes/" + sb.SandboxID + "/rollback", s.key, `{}`, 400, "handle is missing"},
		{"POST", "/gvx/v1/sandboxes/" + sb.SandboxID + "/rollback", s.key, `{"handle":"ck-0"}`, 404, "checkpoint ck-0 not found"},
	} {
		e2 = e2bError{}
		if got := s.call(c.method, c.path, c.key, c.body, &e2); got != c.status || e2.Code != c.status || !strings.Contains(e2.Message, c.says) {
			t.Errorf("%s %s: %d %+v, want %d saying %q", c.method, c.path, got, e2, c.status, c.says)
		}
	}
	if code, out, err := s.run(sb, "echo still; whoami"); err != nil || code != 0 || out != "still\nuser\n" {
		t.Fatalf("after bad input: %d %q %v", code, out, err)
	}
	s.call("DELETE", "/sandboxes/"+sb.SandboxID, s.key, "", nil)

	// 64 concurrent commands over 16 sandboxes.
	var boxes []e2bSandbox
	var mu sync.Mutex
	var wg sync.WaitGroup
	t0 = time.Now()
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := s.create(s.key, `{"templateID":"base"}`)
			mu.Lock()
			boxes = append(boxes, b)
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("16 sandboxes created concurrently in %v", time.Since(t0).Round(time.Millisecond))
	errs := make(chan error, 64)
	t0 = time.Now()
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			b := boxes[i%16]
			code, out, err := s.run(b, fmt.Sprintf("echo cmd-%d; exit %d", i, i%3))
			if err == nil && (code != i%3 || out != fmt.Sprintf("cmd-%d\n", i)) {
				err = fmt.Errorf("command %d in %s: exit %d, stdout %q", i, b.SandboxID, code, out)
			}
			errs <- err
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	t.Logf("64 concurrent commands over 16 sandboxes in %v", time.Since(t0).Round(time.Millisecond))
	for _, b := range boxes {
		if c := s.call("DELETE", "/sandboxes/"+b.SandboxID, s.key, "", nil); c != 204 {
			t.Errorf("kill %s: %d", b.SandboxID, c)
		}
	}
}

// TestServeRestart: sandboxes outlive a crash of the service and are
// re-adopted; one the table lost is removed.
func TestServeRestart(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir := t.TempDir()
	s := startGvxServe(t, dir)
	a := s.create(s.key, `{"templateID":"base"}`)
	b := s.create(s.key, `{"templateID":"base","timeout":3}`)
	if code, _, err := s.run(a, "echo kept > ~/state.txt"); err != nil || code != 0 {
		t.Fatalf("write: %d %v", code, err)
	}
	s.stop(syscall.SIGKILL) // a crash: nothing cleaned up
	time.Sleep(4 * time.Second)
	s = startGvxServe(t, dir)
	defer s.stop(syscall.SIGTERM)
	var d e2bSandbox
	if c := s.call("GET", "/sandboxes/"+a.SandboxID, s.key, "", &d); c != 200 || d.State != "running" {
		t.Fatalf("re-adopted sandbox: %d %+v\n%s", c, d, s.stderr)
	}
	if code, out, err := s.run(a, "cat ~/state.txt"); err != nil || code != 0 || out != "kept\n" {
		t.Fatalf("re-adopted sandbox's file: %d %q %v", code, out, err)
	}
	// b's end time passed while the service was down: it is removed.
	deadline := time.Now().Add(10 * time.Second)
	for s.call("GET", "/sandboxes/"+b.SandboxID, s.key, "", nil) == 200 {
		if time.Now().After(deadline) {
			t.Fatal("a sandbox whose end time passed during the restart is still there")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if c := s.call("DELETE", "/sandboxes/"+a.SandboxID, s.key, "", nil); c != 204 {
		t.Fatalf("kill: %d", c)
	}
}

// TestServeSwebench runs the example episode with the JS SDK and with
// the Python client.
func TestServeSwebench(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	s := startGvxServe(t, t.TempDir())
	defer s.stop(syscall.SIGTERM)
	out, err := s.node(t, "../examples/swebench/episode.mjs")
	t.Logf("episode.mjs:\n%s", out)
	if err != nil || !strings.Contains(out, "solved by 2-middle-two.diff") {
		t.Fatalf("episode.mjs: %v\n%s", err, s.stderr)
	}
	py := exec.Command("python3", "../examples/swebench/episode.py")
	py.Env = append(os.Environ(), "E2B_API_URL="+s.url, "E2B_API_KEY="+s.key, "PYTHONPATH=../clients/python")
	pout, err := py.CombinedOutput()
	t.Logf("episode.py:\n%s", pout)
	if err != nil || !strings.Contains(string(pout), "solved by 2-middle-two.diff") {
		t.Fatalf("episode.py: %v", err)
	}
}

// TestServeRestartPool: a template's pool survives a crash of the
// service: the restarted service takes the dead pool's directory over
// (its server's successor destroys what it left) and serves the template
// from a pool again.
func TestServeRestartPool(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir := t.TempDir()
	tmpl := fmt.Sprintf("[[template]]\nname = \"base\"\nimage = %q\npool_size = 1\n", filepath.Join(e.images, "e2b-base.tar"))
	writeServeFiles(t, dir, tmpl)
	ready := func(s *served) bool {
		var got struct {
			Pool *struct{ Size, Ready int } `json:"pool"`
		}
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			if s.call("GET", "/gvx/v1/templates/base", s.key, "", &got) == 200 && got.Pool != nil && got.Pool.Ready == 1 {
				return true
			}
			time.Sleep(100 * time.Millisecond)
		}
		return false
	}
	s := startGvxServe(t, dir)
	if !ready(s) {
		t.Fatalf("the template's pool never filled:\n%s", s.stderr)
	}
	s.stop(syscall.SIGKILL) // a crash: the pool's directory stays
	s = startGvxServe(t, dir)
	defer func() {
		s.stop(syscall.SIGTERM)
		// Its pool's server stops with it (SIGTERM at its parent's death)
		// and destroys its ready sandbox; wait for that before the leak
		// check.
		deadline := time.Now().Add(time.Minute)
		for poolServers(dir) > 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
	}()
	if !ready(s) {
		t.Fatalf("after a crash the template has no ready pool:\n%s", s.stderr)
	}
	if strings.Contains(s.stderr.String(), "has no pool") {
		t.Errorf("the restarted service served the template without its pool:\n%s", s.stderr)
	}
	sb := s.create(s.key, `{"templateID":"base"}`)
	if code, out, err := s.run(sb, "echo pooled"); err != nil || code != 0 || out != "pooled\n" {
		t.Fatalf("a pooled sandbox after the restart: %d %q %v", code, out, err)
	}
	if c := s.call("DELETE", "/sandboxes/"+sb.SandboxID, s.key, "", nil); c != 204 {
		t.Fatalf("kill: %d", c)
	}
}

// poolServers counts the `gvx pool serve` processes whose config is below
// dir.
func poolServers(dir string) int {
	n := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "pool\x00serve\x00") && strings.Contains(string(b), dir) {
			n++
		}
	}
	return n
}

// TestServeHot: a pooled template keeps a hot sandbox (acquired from its
// pool ahead of the create); a create is handed it and its commands run
// as the template's user in its home, a create with envVars is not (it
// acquires from the pool, its init getting them), the official e2b
// SDK's steps pass on hot sandboxes, and a stop closes the hot sandbox
// (the leak check).
func TestServeHot(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir := t.TempDir()
	tmpl := fmt.Sprintf("[[template]]\nname = \"pooled\"\nimage = %q\npool_size = 1\n", filepath.Join(e.images, "e2b-base.tar"))
	writeServeFiles(t, dir, tmpl)
	s := startGvxServe(t, dir)
	defer s.stopWithPools()
	s.waitPool("pooled")
	sb := s.create(s.key, `{"templateID":"pooled"}`)
	if st := s.poolStatus("pooled"); st.HotReady != 0 {
		t.Errorf("after a create the hot sandbox is still ready (%+v): the create did not take it", st)
	}
	if code, out, err := s.run(sb, "whoami; pwd; echo $HOME"); err != nil || code != 0 || out != "user\n/home/user\n/home/user\n" {
		t.Fatalf("a command in the hot sandbox: %d %q %v", code, out, err)
	}
	if code, _, err := s.run(sb, "exit 3"); err != nil || code != 3 {
		t.Fatalf("exit 3 in the hot sandbox: %d %v", code, err)
	}
	s.waitPool("pooled")
	withEnv := s.create(s.key, `{"templateID":"pooled","envVars":{"FOO":"bar"}}`)
	if st := s.poolStatus("pooled"); st.HotReady != 1 {
		t.Errorf("a create with envVars took the hot sandbox (%+v)", st)
	}
	if code, out, err := s.run(withEnv, "echo $FOO"); err != nil || code != 0 || out != "bar\n" {
		t.Fatalf("envVars in a create from the pool: %d %q %v", code, out, err)
	}
	for _, id := range []string{sb.SandboxID, withEnv.SandboxID} {
		if c := s.call("DELETE", "/sandboxes/"+id, s.key, "", nil); c != 204 {
			t.Fatalf("kill %s: %d", id, c)
		}
	}
	s.waitPool("pooled")
	out, err := s.node(t, "e2b/sdk.mjs", "E2B_TEMPLATE=pooled")
	t.Logf("e2b SDK on the pooled template:\n%s", out)
	if err != nil || !strings.Contains(out, "13 passed, 0 failed") {
		t.Fatalf("the e2b SDK's steps on hot sandboxes: %v\n%s\ngvx serve's log:\n%s", err, out, s.stderr)
	}
}

// TestServeLease: a lease template serves E2B sandboxes as leases of its
// pool. The official SDK's steps and its terminal pass on it; a create
// makes no containerd container; a killed sandbox is reset and serves the
// next create — the same sandbox (booted before the kill), with nothing
// of the last one's left.
func TestServeLease(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir := t.TempDir()
	tmpl := fmt.Sprintf("[[template]]\nname = \"leased\"\nimage = %q\npool_size = 1\nlease = true\n", filepath.Join(e.images, "e2b-base.tar"))
	writeServeFiles(t, dir, tmpl)
	s := startGvxServe(t, dir)
	defer s.stopWithPools()
	deadline := time.Now().Add(2 * time.Minute)
	for st := s.poolStatus("leased"); st.Ready < st.Size || st.Hot != 0; st = s.poolStatus("leased") {
		if time.Now().After(deadline) {
			t.Fatalf("template leased's pool never filled: %+v\n%s", st, s.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t0 := time.Now()
	sb := s.create(s.key, `{"templateID":"leased","envVars":{"FOO":"bar"}}`)
	t.Logf("create: %s", time.Since(t0))
	if code, out, err := s.run(sb, "whoami; pwd; echo $FOO; echo mark > /home/user/mark && echo written; sleep 1000 >/dev/null 2>&1 &"); err != nil || code != 0 || out != "user\n/home/user\nbar\nwritten\n" {
		t.Fatalf("a command in a lease: %d %q %v\n%s", code, out, err, s.stderr)
	}
	t.Logf("create + first command: %s", time.Since(t0))
	cc, err := client.New(e.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if list, err := cc.Containers(namespaces.WithNamespace(context.Background(), "gvx-serve")); err != nil || len(list) != 0 {
		t.Errorf("containerd holds %d containers (%v) for a lease, want none", len(list), err)
	}
	time.Sleep(2 * time.Second)
	tKill := time.Now()
	if c := s.call("DELETE", "/sandboxes/"+sb.SandboxID, s.key, "", nil); c != 204 {
		t.Fatalf("kill: %d", c)
	}
	next := s.create(s.key, `{"templateID":"leased"}`)
	code, out, err := s.run(next, "test -e /home/user/mark && echo 'left: mark'; for p in /proc/[0-9]*; do grep -qx sleep $p/comm 2>/dev/null && echo 'left: sleep'; done; echo ${FOO:-clean}; cut -d. -f1 /proc/uptime")
	var up int
	if _, serr := fmt.Sscanf(strings.TrimPrefix(out, "clean\n"), "%d", &up); err != nil || code != 0 || !strings.HasPrefix(out, "clean\n") || serr != nil {
		t.Fatalf("the next lease: %d %q %v; want clean", code, out, err)
	}
	if since := time.Since(tKill); float64(up) < since.Seconds()+1 {
		t.Errorf("the next create's sandbox is up %d s, %s after the kill: booted anew, not the reset one", up, since)
	}
	if c := s.call("DELETE", "/sandboxes/"+next.SandboxID, s.key, "", nil); c != 204 {
		t.Fatalf("kill: %d", c)
	}
	for _, script := range []string{"e2b/sdk.mjs", "e2b/pty.mjs"} {
		out, err := s.node(t, script, "E2B_TEMPLATE=leased")
		t.Logf("%s on the lease template:\n%s", script, out)
		if want := map[bool]string{true: "13 passed, 0 failed", false: "1 passed, 0 failed"}[script == "e2b/sdk.mjs"]; err != nil || !strings.Contains(out, want) {
			t.Fatalf("%s on leases: %v\n%s\ngvx serve's log:\n%s", script, err, out, s.stderr)
		}
	}
}
