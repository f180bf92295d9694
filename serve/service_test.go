package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/containerd/errdefs"

	"github.com/gvxrun/gvx/serve/backend"
	"github.com/gvxrun/gvx/serve/internal/fakebackend"
)

type fixture struct {
	t     *testing.T
	dir   string
	b     *fakebackend.Backend
	svc   *Service
	hs    *httptest.Server
	key   string // the first key
	other string // the second key
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir(), b: fakebackend.New(), key: NewKey(), other: NewKey()}
	os.WriteFile(filepath.Join(f.dir, "keys"), []byte(f.key+" alice\n"+f.other+" bob\n"), 0o600)
	os.WriteFile(filepath.Join(f.dir, "templates.toml"), []byte("[[template]]\nname = \"base\"\nimage = \"gvx.test/e2b-base:latest\"\n"), 0o644)
	f.start()
	return f
}

func (f *fixture) start() {
	f.t.Helper()
	keys, _, err := LoadKeys(filepath.Join(f.dir, "keys"), false)
	if err != nil {
		f.t.Fatal(err)
	}
	ts, err := LoadTemplates(filepath.Join(f.dir, "templates.toml"), filepath.Join(f.dir, "state", "templates.json"))
	if err != nil {
		f.t.Fatal(err)
	}
	f.svc, err = New(context.Background(), Config{Backend: f.b, Keys: keys, Templates: ts, StateDir: filepath.Join(f.dir, "state"), MaxBody: 4096})
	if err != nil {
		f.t.Fatal(err)
	}
	f.hs = httptest.NewServer(f.svc.Handler())
	f.t.Cleanup(f.stop)
}

func (f *fixture) stop() {
	if f.hs != nil {
		f.hs.Close()
		f.svc.Close(context.Background(), false)
		f.hs = nil
	}
}

// do sends a control-plane request with key and decodes the answer.
func (f *fixture) do(method, path, key, body string, out any) (int, http.Header) {
	f.t.Helper()
	req, _ := http.NewRequest(method, f.hs.URL+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			f.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode, resp.Header
}

// send sends req and returns the answer's status and body.
func (f *fixture) send(req *http.Request) (int, string) {
	f.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

type apiErr struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (f *fixture) create(key, body string) sandboxJSON {
	f.t.Helper()
	var sb sandboxJSON
	if c, _ := f.do("POST", "/v2/sandboxes", key, body, &sb); c != 201 {
		f.t.Fatalf("create: %d", c)
	}
	return sb
}

func TestLifecycle(t *testing.T) {
	f := newFixture(t)
	sb := f.create(f.key, `{"templateID":"base","metadata":{"k":"v"}}`)
	if !strings.HasPrefix(sb.SandboxID, "i") || len(sb.SandboxID) != 21 || sb.EnvdVersion != "0.6.13" || sb.EnvdAccessToken == "" || sb.ClientID == "" {
		t.Fatalf("create answer: %+v", sb)
	}
	var d detailJSON
	if c, _ := f.do("GET", "/sandboxes/"+sb.SandboxID, f.key, "", &d); c != 200 || d.State != Running || d.Metadata["k"] != "v" || d.EnvdAccessToken != sb.EnvdAccessToken {
		t.Fatalf("get: %d %+v", c, d)
	}
	end0, _ := time.Parse(time.RFC3339Nano, d.EndAt)
	if until := time.Until(end0); until < 290*time.Second || until > 301*time.Second {
		t.Fatalf("v2 default timeout: end in %v, want 300 s", until)
	}
	if c, _ := f.do("POST", "/sandboxes/"+sb.SandboxID+"/timeout", f.key, `{"timeout":120}`, nil); c != 204 {
		t.Fatalf("timeout: %d", c)
	}
	f.do("GET", "/sandboxes/"+sb.SandboxID, f.key, "", &d)
	if end, _ := time.Parse(time.RFC3339Nano, d.EndAt); time.Until(end) > 121*time.Second {
		t.Fatalf("setTimeout can shorten: end in %v", time.Until(end))
	}
	if c, _ := f.do("POST", "/sandboxes/"+sb.SandboxID+"/pause", f.key, "{}", nil); c != 204 || !f.b.Get(sb.SandboxID).Paused() {
		t.Fatalf("pause: %d", c)
	}
	var e apiErr
	if c, _ := f.do("POST", "/sandboxes/"+sb.SandboxID+"/pause", f.key, "{}", &e); c != 409 || e.Code != 409 {
		t.Fatalf("pause twice: %d %+v", c, e)
	}
	if c, _ := f.do("POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", f.key, "{}", &sb); c != 201 || f.b.Get(sb.SandboxID).Paused() {
		t.Fatalf("connect of a paused sandbox: %d", c)
	}
	if c, _ := f.do("POST", "/sandboxes/"+sb.SandboxID+"/connect", f.key, `{"timeout":300}`, &sb); c != 200 {
		t.Fatalf("connect of a running sandbox: %d", c)
	}
	var ms []map[string]any
	if c, _ := f.do("GET", "/sandboxes/"+sb.SandboxID+"/metrics", f.key, "", &ms); c != 200 || len(ms) != 1 {
		t.Fatalf("metrics: %d %v", c, ms)
	}
	if c, _ := f.do("DELETE", "/sandboxes/"+sb.SandboxID, f.key, "", nil); c != 204 || f.b.Has(sb.SandboxID) {
		t.Fatalf("kill: %d", c)
	}
	if c, _ := f.do("DELETE", "/sandboxes/"+sb.SandboxID, f.key, "", &e); c != 404 || e.Code != 404 {
		t.Fatalf("kill twice: %d %+v", c, e)
	}
	// v1 create: 15 s default.
	var sb1 sandboxJSON
	if c, _ := f.do("POST", "/sandboxes", f.key, `{"templateID":"base"}`, &sb1); c != 201 {
		t.Fatalf("v1 create: %d", c)
	}
	f.do("GET", "/sandboxes/"+sb1.SandboxID, f.key, "", &d)
	if end, _ := time.Parse(time.RFC3339Nano, d.EndAt); time.Until(end) > 16*time.Second {
		t.Fatalf("v1 default timeout: end in %v", time.Until(end))
	}
}

func TestKeysAndBadInput(t *testing.T) {
	f := newFixture(t)
	sb := f.create(f.key, `{"templateID":"base"}`)
	var e apiErr
	for _, c := range []struct {
		method, path, key, body string
		status                  int
		says                    string
	}{
		{"GET", "/v2/sandboxes", "", "", 401, "API key"},
		{"GET", "/v2/sandboxes", "e2b_00112233445566778899", "", 401, "API key"},
		{"GET", "/sandboxes/" + sb.SandboxID, f.other, "", 404, "not found"},
		{"DELETE", "/sandboxes/" + sb.SandboxID, f.other, "", 404, "not found"},
		{"POST", "/sandboxes/" + sb.SandboxID + "/pause", f.other, "{}", 404, "not found"},
		{"POST", "/v2/sandboxes", f.key, `{"templateID":"nope"}`, 404, "template 'nope' not found"},
		{"POST", "/v2/sandboxes", f.key, `{"templateID":`, 400, "malformed JSON"},
		{"POST", "/v2/sandboxes", f.key, `{}`, 400, "templateID is missing"},
		{"POST", "/v2/sandboxes", f.key, `{"templateID":"base","timeout":-1}`, 400, "timeout"},
		{"POST", "/v2/sandboxes", f.key, `{"templateID":"base","metadata":{"a":"` + strings.Repeat("x", 5000) + `"}}`, 413, "over 4096 bytes"},
		{"POST", "/sandboxes/" + sb.SandboxID + "/timeout", f.key, `{}`, 400, "timeout is missing"},
		{"GET", "/v2/sandboxes?state=dead", f.key, "", 400, "state"},
		{"POST", "/sandboxes/" + sb.SandboxID + "/snapshots", f.key, `{}`, 501, "gvx's checkpoints are"},
		{"POST", "/gvx/v1/sandboxes/" + sb.SandboxID + "/rollback", f.other, `{}`, 404, "not found"},
		{"GET", "/no/such/route", f.key, "", 404, "no such route"},
	} {
		e = apiErr{}
		if st, _ := f.do(c.method, c.path, c.key, c.body, &e); st != c.status || e.Code != c.status || !strings.Contains(e.Message, c.says) {
			t.Errorf("%s %s: %d %+v, want %d saying %q", c.method, c.path, st, e, c.status, c.says)
		}
	}
	// Still serving, and the foreign key's list is empty.
	var list []detailJSON
	if c, _ := f.do("GET", "/v2/sandboxes", f.other, "", &list); c != 200 || len(list) != 0 {
		t.Fatalf("other key's list: %d %v", c, list)
	}
	if c, _ := f.do("GET", "/v2/sandboxes", f.key, "", &list); c != 200 || len(list) != 1 {
		t.Fatalf("own list: %d %v", c, list)
	}
}

func TestListFiltersAndPages(t *testing.T) {
	f := newFixture(t)
	var ids []string
	for i := 0; i < 5; i++ {
		md := `{"templateID":"base","metadata":{"run":"a"}}`
		if i%2 == 1 {
			md = `{"templateID":"base","metadata":{"run":"b"}}`
		}
		ids = append(ids, f.create(f.key, md).SandboxID)
	}
	f.do("POST", "/sandboxes/"+ids[0]+"/pause", f.key, "", nil)
	var list []detailJSON
	f.do("GET", "/v2/sandboxes?metadata=run%3Da", f.key, "", &list)
	if len(list) != 3 {
		t.Fatalf("metadata filter: %d sandboxes", len(list))
	}
	f.do("GET", "/v2/sandboxes?state=paused", f.key, "", &list)
	if len(list) != 1 || list[0].SandboxID != ids[0] {
		t.Fatalf("state filter: %+v", list)
	}
	seen := map[string]bool{}
	next := ""
	for pages := 0; ; pages++ {
		q := "/v2/sandboxes?limit=2&order=asc"
		if next != "" {
			q += "&nextToken=" + next
		}
		_, h := f.do("GET", q, f.key, "", &list)
		for _, d := range list {
			seen[d.SandboxID] = true
		}
		if next = h.Get("X-Next-Token"); next == "" {
			if pages != 2 {
				t.Fatalf("%d pages, want 3", pages+1)
			}
			break
		}
	}
	if len(seen) != 5 {
		t.Fatalf("pages saw %d sandboxes, want 5", len(seen))
	}
}

func TestExpiry(t *testing.T) {
	f := newFixture(t)
	sb := f.create(f.key, `{"templateID":"base","timeout":1}`)
	keep := f.create(f.key, `{"templateID":"base","timeout":1,"autoPause":true}`)
	deadline := time.Now().Add(5 * time.Second)
	for f.b.Has(sb.SandboxID) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if f.b.Has(sb.SandboxID) {
		t.Fatal("sandbox still there 4 s after its end time")
	}
	var e apiErr
	if c, _ := f.do("GET", "/sandboxes/"+sb.SandboxID, f.key, "", &e); c != 404 {
		t.Fatalf("expired sandbox: %d", c)
	}
	var d detailJSON
	for deadline = time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, _ := f.do("GET", "/sandboxes/"+keep.SandboxID, f.key, "", &d); c != 200 || d.State == Paused {
			break
		}
	}
	if c, _ := f.do("GET", "/sandboxes/"+keep.SandboxID, f.key, "", &d); c != 200 || d.State != Paused || !f.b.Get(keep.SandboxID).Paused() {
		t.Fatalf("autoPause sandbox at its end: %d %+v", c, d)
	}
}

func TestRestart(t *testing.T) {
	f := newFixture(t)
	live := f.create(f.key, `{"templateID":"base"}`)
	lost := f.create(f.key, `{"templateID":"base"}`)
	f.stop()
	// One sandbox died while the service was down; one the table does not
	// know appeared.
	f.b.Get(lost.SandboxID).Close(context.Background())
	f.b.Create(context.Background(), "istray", f.svc.cfg.Templates.List()[0], backend.CreateOptions{})
	f.start()
	var d detailJSON
	if c, _ := f.do("GET", "/sandboxes/"+live.SandboxID, f.key, "", &d); c != 200 || d.EnvdAccessToken != live.EnvdAccessToken {
		t.Fatalf("live sandbox after restart: %d", c)
	}
	if c, _ := f.do("GET", "/sandboxes/"+lost.SandboxID, f.key, "", nil); c != 404 {
		t.Fatalf("lost sandbox after restart: %d", c)
	}
	if f.b.Has("istray") {
		t.Fatal("a sandbox the table does not know survived the restart")
	}
	// envd of the re-adopted sandbox answers with its old token.
	req, _ := http.NewRequest("GET", f.hs.URL+"/health", nil)
	req.Header.Set("E2b-Sandbox-Id", live.SandboxID)
	resp, _ := http.DefaultClient.Do(req)
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("health after restart: %d", resp.StatusCode)
	}
}

func TestEnvdRouting(t *testing.T) {
	f := newFixture(t)
	sb := f.create(f.key, `{"templateID":"base"}`)
	call := func(host, id, token string) (int, string) {
		body := []byte(`{"path":"/","depth":1}`)
		req, _ := http.NewRequest("POST", f.hs.URL+"/filesystem.Filesystem/ListDir", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if host != "" {
			req.Host = host
		}
		if id != "" {
			req.Header.Set("E2b-Sandbox-Id", id)
			req.Header.Set("E2b-Sandbox-Port", EnvdPort)
		}
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		return f.send(req)
	}
	if c, b := call("", sb.SandboxID, sb.EnvdAccessToken); c != 200 || !strings.Contains(b, "FILE_TYPE_DIRECTORY") {
		t.Fatalf("by header: %d %s", c, b)
	}
	if c, _ := call("49983-"+sb.SandboxID+".gvx.test", "", sb.EnvdAccessToken); c != 200 {
		t.Fatalf("by host: %d", c)
	}
	if c, _ := call("", sb.SandboxID, "wrong"); c != 401 {
		t.Fatalf("wrong token: %d", c)
	}
	if c, b := call("", "inosuchsandbox", "x"); c != 502 || !strings.Contains(b, "The sandbox was not found") {
		t.Fatalf("unknown sandbox: %d %s", c, b)
	}
	if c, _ := call("8080-"+sb.SandboxID+".gvx.test", "", sb.EnvdAccessToken); c != 502 {
		t.Fatalf("other port: %d", c)
	}
	f.do("POST", "/sandboxes/"+sb.SandboxID+"/pause", f.key, "", nil)
	if c, b := call("", sb.SandboxID, sb.EnvdAccessToken); c != 502 || !strings.Contains(b, "paused") {
		t.Fatalf("paused: %d %s", c, b)
	}
}

func TestTemplatesAndReset(t *testing.T) {
	f := newFixture(t)
	var ts []map[string]any
	if c, _ := f.do("GET", "/gvx/v1/templates", f.key, "", &ts); c != 200 || len(ts) != 1 {
		t.Fatalf("templates: %d %v", c, ts)
	}
	var e apiErr
	if c, _ := f.do("POST", "/gvx/v1/templates", f.key, `{"name":"py","image":"gvx.test/py:1","poolSize":2}`, nil); c != 201 {
		t.Fatalf("add template: %d", c)
	}
	if c, _ := f.do("POST", "/gvx/v1/templates", f.key, `{"name":"Bad Name","image":"x"}`, &e); c != 400 || !strings.Contains(e.Message, "template name") {
		t.Fatalf("bad template: %d %+v", c, e)
	}
	if c, _ := f.do("DELETE", "/gvx/v1/templates/base", f.key, "", &e); c != 409 {
		t.Fatalf("delete a file template: %d", c)
	}
	f.create(f.key, `{"templateID":"py"}`)
	sb := f.create(f.key, `{"templateID":"base"}`)
	creates := f.b.Creates
	var after sandboxJSON
	if c, _ := f.do("POST", "/gvx/v1/sandboxes/"+sb.SandboxID+"/reset", f.key, "", &after); c != 200 || after.SandboxID != sb.SandboxID || after.EnvdAccessToken != sb.EnvdAccessToken || f.b.Creates != creates+1 {
		t.Fatalf("reset: %d %+v", c, after)
	}
	// API templates survive a restart.
	f.stop()
	f.start()
	if c, _ := f.do("GET", "/gvx/v1/templates/py", f.key, "", nil); c != 200 {
		t.Fatalf("API template after restart: %d", c)
	}
	resp, _ := http.Get(f.hs.URL + "/metrics")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `gvx_serve_sandboxes{state="running"} 2`) {
		t.Fatalf("metrics:\n%s", b)
	}
	resp, _ = http.Get(f.hs.URL + "/gvx/v1/openapi.json")
	var doc map[string]any
	json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if doc["openapi"] == nil {
		t.Fatalf("openapi document: %v", doc)
	}
}

func TestKeysFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "keys")
	_, created, err := LoadKeys(p, true)
	if err != nil || !keyPattern.MatchString(created) || len(created) != 44 {
		t.Fatalf("new keys file: %q %v", created, err)
	}
	os.Chmod(p, 0o644)
	if _, _, err := LoadKeys(p, false); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable keys file: %v", err)
	}
	os.Chmod(p, 0o600)
	os.WriteFile(p, []byte("sk-123\n"), 0o600)
	if _, _, err := LoadKeys(p, false); err == nil || !strings.Contains(err.Error(), "e2b_<hex>") {
		t.Fatalf("malformed key: %v", err)
	}
}

// TestCreateRefused: a create the node refuses (admission's
// ResourceExhausted) is a 503 naming the reason, counted as an admission
// failure in the metrics; other failures stay 500s.
func TestCreateRefused(t *testing.T) {
	f := newFixture(t)
	f.b.FailCreate = fmt.Errorf("sandbox x: %w: node memory is 95.0%% used, above admission.memory_percent = 90", errdefs.ErrResourceExhausted)
	var e struct{ Message string }
	if c, _ := f.do("POST", "/sandboxes", f.key, `{"templateID":"base"}`, &e); c != http.StatusServiceUnavailable || !strings.Contains(e.Message, "admission.memory_percent") {
		t.Errorf("refused create: %d %q", c, e.Message)
	}
	f.b.FailCreate = errors.New("clone volume /v.ext4: no space left on device")
	if c, _ := f.do("POST", "/sandboxes", f.key, `{"templateID":"base"}`, nil); c != http.StatusInternalServerError {
		t.Errorf("failed create: %d", c)
	}
	resp, err := http.Get(f.hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`gvx_operations_total{component="serve",op="create",outcome="admission"} 1`,
		`gvx_operations_total{component="serve",op="create",outcome="volume"} 1`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestHotHandOver: a create handed a sandbox the backend made under its
// own id (a hot sandbox) serves it under the service's id, records the
// backend's id, re-adopts it by that id after a restart (not removing it
// as unknown) and removes it at the kill.
func TestHotHandOver(t *testing.T) {
	f := newFixture(t)
	f.b.Hot = []string{"hready1"}
	sb := f.create(f.key, `{"templateID":"base"}`)
	if sb.SandboxID == "hready1" || !f.b.Has("hready1") || f.b.Has(sb.SandboxID) {
		t.Fatalf("create %s: want the service's id over the backend's hready1 (backend has it: %v)", sb.SandboxID, f.b.Has("hready1"))
	}
	health := func() int {
		req, _ := http.NewRequest("GET", f.hs.URL+"/health", nil)
		req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := health(); c != 204 {
		t.Fatalf("envd of the handed-over sandbox: %d", c)
	}
	f.stop()
	var recs []record
	if b, err := os.ReadFile(filepath.Join(f.dir, "state", "sandboxes.json")); err != nil || json.Unmarshal(b, &recs) != nil || len(recs) != 1 || recs[0].Backing != "hready1" {
		t.Fatalf("the table: %v %+v, want one row backed by hready1", err, recs)
	}
	f.start()
	if !f.b.Has("hready1") {
		t.Fatal("the restart removed the handed-over sandbox as unknown")
	}
	if c := health(); c != 204 {
		t.Fatalf("envd after the restart: %d", c)
	}
	if c, _ := f.do("DELETE", "/sandboxes/"+sb.SandboxID, f.key, "", nil); c != 204 {
		t.Fatalf("kill: %d", c)
	}
	if f.b.Has("hready1") {
		t.Fatal("the kill left the backend's sandbox")
	}
}

// TestTemplateHot: a pooled template keeps one hot sandbox unless it says
// otherwise; hot is refused without a pool, negative or over the pool.
func TestTemplateHot(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, c := range []struct {
		pool int
		hot  *int
		want int
		bad  bool
	}{{0, nil, 0, false}, {2, nil, 1, false}, {2, n(0), 0, false}, {2, n(2), 2, false}, {2, n(3), 0, true}, {0, n(1), 0, true}, {2, n(-1), 0, true}} {
		tm := backend.Template{Name: "t", Image: "img", PoolSize: c.pool, Hot: c.hot}
		err := CheckTemplate(tm)
		if (err != nil) != c.bad {
			t.Errorf("pool %d hot %v: CheckTemplate %v, want refused %v", c.pool, c.hot, err, c.bad)
		}
		if !c.bad && tm.HotSize() != c.want {
			t.Errorf("pool %d hot %v: HotSize %d, want %d", c.pool, c.hot, tm.HotSize(), c.want)
		}
	}
	var f templatesFile
	if _, err := toml.Decode("[[template]]\nname = \"a\"\nimage = \"i\"\npool_size = 2\nhot = 0\n", &f); err != nil || f.Template[0].HotSize() != 0 {
		t.Fatalf("hot = 0 in TOML: %v %+v", err, f.Template)
	}
}

// TestNetwork: E2B's allow_internet_access and network narrow a NAT
// template's egress policy, for the sandbox's life (resets included);
// bad rules and an egress proxy are refused by name; a template's network
// settings are checked.
func TestNetwork(t *testing.T) {
	f := newFixture(t)
	var e apiErr
	if c, _ := f.do("POST", "/gvx/v1/templates", f.key, `{"name":"net","image":"gvx.test/py:1","network":"nat","nat":{"egress":{"allow":["10.0.2.2:5000"]},"bandwidth":"8M"}}`, nil); c != 201 {
		t.Fatalf("add a NAT template: %d", c)
	}
	for body, why := range map[string]string{
		`{"name":"n1","image":"x","network":"bridge"}`:                                 `network "bridge"`,
		`{"name":"n2","image":"x","nat":{"dns":["127.0.0.1:53"]}}`:                     `need network = "nat"`,
		`{"name":"n3","image":"x","network":"nat","nat":{"egress":{"allow":["a b"]}}}`: `egress rule "a b"`,
		`{"name":"n4","image":"x","network":"nat","nat":{"bandwidth":"fast"}}`:         "nat.bandwidth",
	} {
		if c, _ := f.do("POST", "/gvx/v1/templates", f.key, body, &e); c != 400 || !strings.Contains(e.Message, why) {
			t.Errorf("template %s: %d %q, want 400 saying %q", body, c, e.Message, why)
		}
	}
	for _, tc := range []struct {
		body     string
		narrow   string // the backend's narrowing, as JSON
		internet bool
	}{
		{`{"templateID":"net"}`, "null", true},
		{`{"templateID":"net","allow_internet_access":true}`, "null", true},
		{`{"templateID":"net","allow_internet_access":false}`, `{"default":"deny"}`, false},
		{`{"templateID":"net","network":{"denyOut":["0.0.0.0/0"],"allowOut":["1.1.1.1","pypi.org"]}}`, `{"allow":["1.1.1.1","pypi.org"],"deny":["0.0.0.0/0"]}`, true},
		{`{"templateID":"base","allow_internet_access":false}`, "null", false}, // no network to narrow
		{`{"templateID":"base"}`, "null", false},
	} {
		sb := f.create(f.key, tc.body)
		got, _ := json.Marshal(f.b.Get(sb.SandboxID).Narrow)
		if string(got) != tc.narrow {
			t.Errorf("create %s: narrowing %s, want %s", tc.body, got, tc.narrow)
		}
		var d detailJSON
		if c, _ := f.do("GET", "/sandboxes/"+sb.SandboxID, f.key, "", &d); c != 200 || d.AllowInternetAccess != tc.internet {
			t.Errorf("create %s: detail %d allowInternetAccess %v, want %v", tc.body, c, d.AllowInternetAccess, tc.internet)
		}
		if strings.Contains(tc.body, "allowOut") && (d.Network == nil || len(d.Network.AllowOut) != 2) {
			t.Errorf("create %s: detail's network %+v", tc.body, d.Network)
		}
		// A reset keeps what the create asked.
		if c, _ := f.do("POST", "/gvx/v1/sandboxes/"+sb.SandboxID+"/reset", f.key, "", nil); c != 200 {
			t.Fatalf("reset: %d", c)
		}
		if again, _ := json.Marshal(f.b.Get(sb.SandboxID).Narrow); string(again) != tc.narrow {
			t.Errorf("create %s, reset: narrowing %s, want %s", tc.body, again, tc.narrow)
		}
	}
	// updateNetwork replaces the narrowing; the service keeps it over
	// rollbacks and forks (whose checkpoint has the one before).
	sb := f.create(f.key, `{"templateID":"net","network":{"denyOut":["8.8.8.8"]}}`)
	var ck struct{ Handle string }
	if c, _ := f.do("POST", "/gvx/v1/sandboxes/"+sb.SandboxID+"/checkpoints", f.key, "", &ck); c != 201 {
		t.Fatalf("checkpoint: %d", c)
	}
	if c, _ := f.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", f.key, `{"allow_internet_access":false,"allowOut":["1.1.1.1"]}`, &e); c != 204 {
		t.Fatalf("updateNetwork: %d %q", c, e.Message)
	}
	want := `{"default":"deny","allow":["1.1.1.1"]}`
	narrowOf := func(id string) string {
		var backing string
		f.svc.mu.Lock()
		backing = f.svc.boxes[id].rec.backing()
		f.svc.mu.Unlock()
		got, _ := json.Marshal(f.b.Get(backing).Narrow)
		return string(got)
	}
	if got := narrowOf(sb.SandboxID); got != want {
		t.Errorf("after updateNetwork: narrowing %s, want %s", got, want)
	}
	var d detailJSON
	if f.do("GET", "/sandboxes/"+sb.SandboxID, f.key, "", &d); d.AllowInternetAccess || d.Network == nil || d.Network.AllowOut[0] != "1.1.1.1" {
		t.Errorf("detail after updateNetwork: %+v %+v", d.AllowInternetAccess, d.Network)
	}
	if c, _ := f.do("POST", "/gvx/v1/sandboxes/"+sb.SandboxID+"/rollback", f.key, `{"handle":"`+ck.Handle+`"}`, nil); c != 200 {
		t.Fatalf("rollback: %d", c)
	}
	if got := narrowOf(sb.SandboxID); got != want {
		t.Errorf("after a rollback to a checkpoint of before: narrowing %s, want the last asked, %s", got, want)
	}
	var forks []sandboxJSON
	if c, _ := f.do("POST", "/gvx/v1/sandboxes/"+sb.SandboxID+"/fork", f.key, `{"count":2,"handle":"`+ck.Handle+`"}`, &forks); c != 201 || len(forks) != 2 {
		t.Fatalf("fork: %d %v", c, forks)
	}
	for _, fk := range forks {
		if got := narrowOf(fk.SandboxID); got != want {
			t.Errorf("fork %s: narrowing %s, want the parent's, %s", fk.SandboxID, got, want)
		}
	}
	if c, _ := f.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", f.key, `{}`, nil); c != 204 || narrowOf(sb.SandboxID) != "null" {
		t.Errorf("updateNetwork {}: %d, narrowing %s, want none", c, narrowOf(sb.SandboxID))
	}
	f.b.FailNarrow = errors.New("the NAT is gone")
	if c, _ := f.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", f.key, `{"denyOut":["9.9.9.9"]}`, &e); c != 500 || !strings.Contains(e.Message, "the NAT is gone") {
		t.Errorf("failed updateNetwork: %d %q, want 500 with the reason", c, e.Message)
	}
	var d2 detailJSON
	if f.do("GET", "/sandboxes/"+sb.SandboxID, f.key, "", &d2); d2.Network != nil || !d2.AllowInternetAccess {
		t.Errorf("a failed updateNetwork changed the record: %+v", d2.Network)
	}
	boxes := func() int { ids, _ := f.b.List(context.Background()); return len(ids) }
	before := boxes()
	if c, _ := f.do("POST", "/gvx/v1/sandboxes/"+sb.SandboxID+"/fork", f.key, `{"count":2,"handle":"`+ck.Handle+`"}`, &e); c != 500 || boxes() != before {
		t.Errorf("fork whose narrowing fails: %d %q, %d sandboxes left of %d", c, e.Message, boxes(), before)
	}
	f.b.FailNarrow = nil
	if c, _ := f.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", f.other, `{}`, nil); c != 404 {
		t.Errorf("updateNetwork of another key's sandbox: %d, want 404", c)
	}
	creates := f.b.Creates
	for body, why := range map[string]string{
		`{"templateID":"net","network":{"denyOut":["10.0.0.0/99"]}}`:                      "network.denyOut[0]",
		`{"templateID":"net","network":{"allowOut":["ok.example.com","bad name"]}}`:       "network.allowOut[1]",
		`{"templateID":"net","network":{"egressProxy":{"address":"proxy.example:1080"}}}`: "network.egressProxy",
	} {
		if c, _ := f.do("POST", "/v2/sandboxes", f.key, body, &e); c != 400 || !strings.Contains(e.Message, why) {
			t.Errorf("create %s: %d %q, want 400 saying %q", body, c, e.Message, why)
		}
	}
	if f.b.Creates != creates {
		t.Errorf("refused creates reached the backend: %d creates", f.b.Creates-creates)
	}
}

// TestSandboxPorts: a NAT template's sandbox's ports are proxied (by
// <port>-<id>.<domain> and by the E2b-Sandbox-Id/-Port headers), without
// the service's headers; allowPublicTraffic: false makes them want the
// sandbox's trafficAccessToken; a port nobody listens on, and a
// sandbox without a network, answer 502 saying why.
func TestSandboxPorts(t *testing.T) {
	f := newFixture(t)
	seen := make(chan http.Header, 4)
	guest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		fmt.Fprintf(w, "guest %s %s", r.Method, r.URL.Path)
	}))
	defer guest.Close()
	f.b.Ports = map[int]string{8000: guest.Listener.Addr().String()}
	if c, _ := f.do("POST", "/gvx/v1/templates", f.key, `{"name":"net","image":"gvx.test/py:1","network":"nat"}`, nil); c != 201 {
		t.Fatalf("add a NAT template: %d", c)
	}
	get := func(host string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest("GET", f.hs.URL+"/app/x?q=1", nil)
		req.Host = host
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return f.send(req)
	}
	pub := f.create(f.key, `{"templateID":"net"}`)
	if pub.TrafficAccessToken != nil {
		t.Errorf("a public sandbox got a traffic token")
	}
	if c, body := get("8000-"+pub.SandboxID+".gvx.test", nil); c != 200 || body != "guest GET /app/x" {
		t.Errorf("by Host: %d %q", c, body)
	}
	if c, body := get("localhost", map[string]string{"E2b-Sandbox-Id": pub.SandboxID, "E2b-Sandbox-Port": "8000", "X-API-KEY": f.key}); c != 200 || body != "guest GET /app/x" {
		t.Errorf("by headers: %d %q", c, body)
	}
	<-seen
	h := <-seen // the request by headers
	for _, k := range []string{"E2b-Sandbox-Id", "E2b-Sandbox-Port", "X-Api-Key"} {
		if h.Get(k) != "" {
			t.Errorf("the guest got the service's header %s", k)
		}
	}
	priv := f.create(f.key, `{"templateID":"net","network":{"allowPublicTraffic":false}}`)
	if priv.TrafficAccessToken == nil || *priv.TrafficAccessToken == "" {
		t.Fatalf("a private sandbox has no traffic token: %+v", priv)
	}
	host := "8000-" + priv.SandboxID + ".gvx.test"
	if c, body := get(host, nil); c != 403 || !strings.Contains(body, "e2b-traffic-access-token") {
		t.Errorf("a private port without the token: %d %q", c, body)
	}
	if c, _ := get(host, map[string]string{"E2b-Traffic-Access-Token": "wrong"}); c != 403 {
		t.Errorf("a private port with a wrong token: %d", c)
	}
	if c, body := get(host, map[string]string{"E2b-Traffic-Access-Token": *priv.TrafficAccessToken}); c != 200 || body != "guest GET /app/x" {
		t.Errorf("a private port with its token: %d %q", c, body)
	}
	if v := (<-seen).Get("E2b-Traffic-Access-Token"); v != "" {
		t.Errorf("the guest got the traffic token")
	}
	if c, body := get("8001-"+pub.SandboxID+".gvx.test", nil); c != 502 || !strings.Contains(body, "guest port 8001") {
		t.Errorf("a closed port: %d %q", c, body)
	}
	plain := f.create(f.key, `{"templateID":"base"}`)
	if c, body := get("8000-"+plain.SandboxID+".gvx.test", nil); c != 502 || !strings.Contains(body, "no network") {
		t.Errorf("a port of a sandbox without a network: %d %q", c, body)
	}
}

// TestRestartRemovesInBackground: a start answers at once, however long
// the removal of an earlier run's sandbox takes (before, it removed them
// before it returned: 17 s after a crash was seen).
func TestRestartRemovesInBackground(t *testing.T) {
	f := newFixture(t)
	f.stop()
	f.b.Create(context.Background(), "istray", f.svc.cfg.Templates.List()[0], backend.CreateOptions{})
	f.b.DestroyDelay = time.Second
	t0 := time.Now()
	f.start()
	if took := time.Since(t0); took > 500*time.Millisecond {
		t.Errorf("the start took %s with a removal of 1 s to do", took)
	}
	if !f.b.Has("istray") {
		t.Error("the stray sandbox was removed before the start returned")
	}
	if c, _ := f.do("GET", "/v2/sandboxes", f.key, "", nil); c != 200 {
		t.Errorf("listing during the removal: %d", c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.b.Has("istray") {
		if time.Now().After(deadline) {
			t.Fatal("the stray sandbox is still there 5 s after the start")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRestartRetriesRemovals: a sandbox the table does not know whose
// removal fails at the start is removed by a later try.
func TestRestartRetriesRemovals(t *testing.T) {
	every := removeRetryEvery
	removeRetryEvery = 10 * time.Millisecond
	t.Cleanup(func() { removeRetryEvery = every })
	f := newFixture(t)
	f.stop()
	f.b.Create(context.Background(), "istray", f.svc.cfg.Templates.List()[0], backend.CreateOptions{})
	f.b.FailDestroys = 3
	f.start()
	deadline := time.Now().Add(5 * time.Second)
	for f.b.Has("istray") {
		if time.Now().After(deadline) {
			t.Fatal("the sandbox whose removal failed at the start is still there")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if left := f.b.DestroysToFail(); left != 0 {
		t.Errorf("%d of the 3 failing removals were never tried: the retry did not happen", left)
	}
}

// TestTemplateLease: a lease template needs a pool and takes no docker
// mode, checkpointing, cmd or hot sandboxes, each refusal naming what to
// change; it keeps no hot sandbox; lease = true reads from TOML.
func TestTemplateLease(t *testing.T) {
	n := func(v int) *int { return &v }
	ok := backend.Template{Name: "l", Image: "img", PoolSize: 4, Lease: true}
	if err := CheckTemplate(ok); err != nil || ok.HotSize() != 0 {
		t.Fatalf("a lease template: %v, hot %d; want accepted, no hot", err, ok.HotSize())
	}
	for _, c := range []struct {
		change func(*backend.Template)
		want   string
	}{
		{func(t *backend.Template) { t.PoolSize = 0 }, "set pool_size"},
		{func(t *backend.Template) { t.Docker = true }, "drop docker"},
		{func(t *backend.Template) { t.Checkpointable = true }, "checkpointable"},
		{func(t *backend.Template) { t.Cmd = []string{"sleep", "1"} }, "cmd"},
		{func(t *backend.Template) { t.Hot = n(1) }, "drop hot"},
	} {
		tm := ok
		c.change(&tm)
		if err := CheckTemplate(tm); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want a refusal saying %q", tm, err, c.want)
		}
	}
	var f templatesFile
	if _, err := toml.Decode("[[template]]\nname = \"a\"\nimage = \"i\"\npool_size = 2\nlease = true\n", &f); err != nil || !f.Template[0].Lease || CheckTemplate(f.Template[0]) != nil {
		t.Fatalf("lease = true in TOML: %v %+v", err, f.Template)
	}
}
