package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gvxrun/gvx/serve/backend"
)

// inertBackend's sandboxes run nothing: a fuzzer's requests reach every
// route without executing anything on the host.
type inertBackend struct {
	mu    sync.Mutex
	boxes map[string]bool
}

type inertSandbox struct{}

var errInert = errors.New("inert sandbox runs nothing")

func (b *inertBackend) Create(_ context.Context, id string, _ backend.Template, _ backend.CreateOptions) (backend.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.boxes[id] = true
	return inertSandbox{}, nil
}
func (b *inertBackend) Attach(context.Context, string, backend.Template) (backend.Sandbox, error) {
	return nil, backend.ErrNotFound
}
func (b *inertBackend) Destroy(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.boxes, id)
	return nil
}
func (b *inertBackend) List(context.Context) ([]string, error) { return nil, nil }
func (b *inertBackend) Close() error                           { return nil }

func (inertSandbox) Exec(context.Context, backend.Cmd) (backend.Process, error) { return nil, errInert }
func (inertSandbox) Pause(context.Context) error                                { return nil }
func (inertSandbox) Resume(context.Context) error                               { return nil }
func (inertSandbox) Stats(context.Context) (backend.Stats, error)               { return backend.Stats{}, nil }
func (inertSandbox) Close(context.Context) error                                { return nil }

// publicPaths answer without a key.
var publicPaths = map[string]bool{"/healthz": true, "/metrics": true, "/gvx/v1/openapi.json": true}

// FuzzHandler feeds raw HTTP requests to the service's handler. In the
// request, KEY stands for a valid API key, SBX for a running sandbox's id
// and TOK for its envd access token. Whatever the request, the handler
// does not panic, and a request carrying neither a valid key nor the
// token gets no 2xx answer except from the public routes and envd's
// /health.
func FuzzHandler(f *testing.F) {
	for _, s := range []string{
		"GET /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: KEY\r\n\r\n",
		"POST /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: KEY\r\nContent-Length: 40\r\n\r\n{\"templateID\":\"base\",\"timeout\":30000}",
		"POST /sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 22\r\n\r\n{\"templateID\":\"base\"}",
		"DELETE /sandboxes/SBX HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer KEY\r\n\r\n",
		"POST /sandboxes/SBX/timeout HTTP/1.1\r\nHost: x\r\nX-API-Key: KEY\r\nContent-Length: 13\r\n\r\n{\"timeout\":5}",
		"POST /sandboxes/SBX/pause HTTP/1.1\r\nHost: x\r\nX-API-Key: wrong\r\n\r\n",
		"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /health HTTP/1.1\r\nHost: 49983-SBX.gvx.local\r\n\r\n",
		"POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: SBX\r\nX-Access-Token: TOK\r\nContent-Type: application/connect+json\r\nContent-Length: 5\r\n\r\n\x00\x00\x00\x00\x00",
		"POST /filesystem.Filesystem/Stat HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: SBX\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"path\":\"/\"}",
		"GET /files?path=/etc/passwd&signature=v1_x&signature_expiration=99999999999 HTTP/1.1\r\nHost: 49983-SBX.gvx.local\r\n\r\n",
		"POST /v2/templates HTTP/1.1\r\nHost: x\r\nX-API-Key: KEY\r\nContent-Length: 2\r\n\r\n{}",
		"GET /gvx/v1/checkpoints HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	key := NewKey()
	if err := os.WriteFile(filepath.Join(dir, "keys"), []byte(key+" alice\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "templates.toml"), []byte("[[template]]\nname = \"base\"\nimage = \"gvx.test/e2b-base:latest\"\n"), 0o644)
	keys, _, err := LoadKeys(filepath.Join(dir, "keys"), false)
	if err != nil {
		f.Fatal(err)
	}
	ts, err := LoadTemplates(filepath.Join(dir, "templates.toml"), filepath.Join(dir, "state", "templates.json"))
	if err != nil {
		f.Fatal(err)
	}
	svc, err := New(context.Background(), Config{Backend: &inertBackend{boxes: map[string]bool{}}, Keys: keys, Templates: ts, StateDir: filepath.Join(dir, "state"), MaxBody: 4096})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { svc.Close(context.Background(), false) })
	h := svc.Handler()
	// One sandbox that the fuzzer's requests can name.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/sandboxes", strings.NewReader(`{"templateID":"base","timeout":3600}`))
	req.Header.Set("X-API-Key", key)
	h.ServeHTTP(rec, req)
	var created struct {
		ID    string `json:"sandboxID"`
		Token string `json:"envdAccessToken"`
	}
	if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &created) != nil || created.ID == "" {
		f.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		authed := bytes.Contains(raw, []byte("KEY")) || bytes.Contains(raw, []byte("TOK"))
		raw = bytes.ReplaceAll(raw, []byte("KEY"), []byte(key))
		raw = bytes.ReplaceAll(raw, []byte("TOK"), []byte(created.Token))
		raw = bytes.ReplaceAll(raw, []byte("SBX"), []byte(created.ID))
		if bytes.Contains(raw, []byte(key)) || bytes.Contains(raw, []byte(created.Token)) {
			authed = true
		}
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return
		}
		// Keep the one sandbox the fuzzer names: no deleting or pausing it.
		if strings.Contains(r.URL.Path, created.ID) && r.Method != http.MethodGet {
			if r.Header.Get("E2b-Sandbox-Id") == "" && !hostRoute.MatchString(r.Host) {
				return
			}
		}
		// Streams (envd's process and watch routes) end with the request.
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r.WithContext(ctx))
		if authed || w.Code < 200 || w.Code > 299 {
			return
		}
		envd := r.Header.Get("E2b-Sandbox-Id") != "" || hostRoute.MatchString(r.Host)
		if envd && r.URL.Path == "/health" || !envd && publicPaths[r.URL.Path] {
			return
		}
		t.Fatalf("unauthenticated %s %s (host %q, envd %v) answered %d: %.200s", r.Method, r.URL, r.Host, envd, w.Code, w.Body)
	})
}
