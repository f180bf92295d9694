package serve

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gvxrun/gvx/serve/backend"
)

// instant is a backend whose sandboxes cost nothing: creates return at
// once and commands exit 0 at once, so that a cycle through the service
// measures the service alone (HTTP, JSON, Connect framing, the table).
type instant struct{}

func (instant) Create(context.Context, string, backend.Template, backend.CreateOptions) (backend.Sandbox, error) {
	return instantBox{}, nil
}
func (instant) Attach(context.Context, string, backend.Template) (backend.Sandbox, error) {
	return nil, backend.ErrNotFound
}
func (instant) Destroy(context.Context, string) error           { return nil }
func (instant) List(context.Context) ([]string, error)          { return nil, nil }
func (instant) Close() error                                    { return nil }
func (instantBox) Pause(context.Context) error                  { return nil }
func (instantBox) Resume(context.Context) error                 { return nil }
func (instantBox) Close(context.Context) error                  { return nil }
func (instantBox) Stats(context.Context) (backend.Stats, error) { return backend.Stats{}, nil }

type instantBox struct{}

func (instantBox) Exec(context.Context, backend.Cmd) (backend.Process, error) {
	return instantProc{}, nil
}

type instantProc struct{}

func (instantProc) Signal(context.Context, syscall.Signal) error { return nil }
func (instantProc) Resize(context.Context, uint32, uint32) error { return nil }
func (instantProc) Wait(context.Context) (int, error)            { return 0, nil }

// BenchmarkServiceCycle is the service's own cost of an E2B create +
// commands.run('true') + kill over loopback HTTP:
//
//	go test -run - -bench ServiceCycle ./serve/
func BenchmarkServiceCycle(b *testing.B) {
	dir := b.TempDir()
	key := NewKey()
	os.WriteFile(filepath.Join(dir, "keys"), []byte(key+"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "t.toml"), []byte("[[template]]\nname = \"base\"\nimage = \"x\"\n"), 0o644)
	keys, _, err := LoadKeys(filepath.Join(dir, "keys"), false)
	if err != nil {
		b.Fatal(err)
	}
	ts, err := LoadTemplates(filepath.Join(dir, "t.toml"), filepath.Join(dir, "api.json"))
	if err != nil {
		b.Fatal(err)
	}
	svc, err := New(context.Background(), Config{Backend: instant{}, Keys: keys, Templates: ts, StateDir: filepath.Join(dir, "state")})
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Close(context.Background(), false)
	hs := httptest.NewServer(svc.Handler())
	defer hs.Close()
	cl := hs.Client()
	msg := []byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","true"]},"stdin":false}`)
	var env bytes.Buffer
	env.WriteByte(0)
	_ = binary.Write(&env, binary.BigEndian, uint32(len(msg)))
	env.Write(msg)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest("POST", hs.URL+"/v2/sandboxes", strings.NewReader(`{"templateID":"base"}`))
		req.Header.Set("X-API-KEY", key)
		resp, err := cl.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var sb sandboxJSON
		json.NewDecoder(resp.Body).Decode(&sb)
		resp.Body.Close()
		req, _ = http.NewRequest("POST", hs.URL+"/process.Process/Start", bytes.NewReader(env.Bytes()))
		req.Header.Set("Content-Type", "application/connect+json")
		req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
		req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
		resp, err = cl.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Contains(out, []byte(`"end"`)) {
			b.Fatalf("no end event: %q", out)
		}
		req, _ = http.NewRequest("DELETE", hs.URL+"/sandboxes/"+sb.SandboxID, nil)
		req.Header.Set("X-API-KEY", key)
		resp, err = cl.Do(req)
		if err != nil || resp.StatusCode != 204 {
			b.Fatalf("kill: %v %v", resp.StatusCode, err)
		}
		resp.Body.Close()
	}
}
