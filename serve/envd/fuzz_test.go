package envd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/serve/backend"
)

// inert is a sandbox that runs nothing: fuzzed requests reach envd's
// decoding and routing without executing anything on the host.
type inert struct{}

func (inert) Exec(context.Context, backend.Cmd) (backend.Process, error) {
	return nil, errors.New("inert sandbox runs nothing")
}
func (inert) Pause(context.Context) error                  { return nil }
func (inert) Resume(context.Context) error                 { return nil }
func (inert) Stats(context.Context) (backend.Stats, error) { return backend.Stats{}, nil }
func (inert) Close(context.Context) error                  { return nil }

// FuzzEnvdRequest feeds raw HTTP requests to envd: no panic, and no
// success for a call the sandbox could not have run.
func FuzzEnvdRequest(f *testing.F) {
	for _, s := range []string{
		"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /files?path=/etc/passwd&username=root HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /files?path=/tmp/a HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 74\r\n\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nhi\r\n--b--\r\n",
		"POST /filesystem.Filesystem/ListDir HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 26\r\n\r\n{\"path\":\"/\",\"depth\":1000}",
		"POST /process.Process/SendSignal HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 56\r\n\r\n{\"process\":{\"pid\":1},\"signal\":\"SIGNAL_SIGKILL\"}",
		"POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\nContent-Length: 40\r\n\r\n\x00\x00\x00\x00\x23{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[]}}",
		"POST /process.Process/SendInput HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 48\r\n\r\n{\"process\":{\"tag\":\"x\"},\"input\":{\"stdin\":\"aGk=\"}}",
	} {
		f.Add([]byte(s))
	}
	s := New(inert{}, Defaults{User: "user", Workdir: "/home/user"})
	f.Cleanup(s.Close)
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r.WithContext(ctx))
		if w.Code == http.StatusOK && (strings.HasPrefix(r.URL.Path, "/filesystem.") || r.URL.Path == "/files") &&
			!strings.Contains(w.Header().Get("Content-Type"), "connect") {
			t.Fatalf("%s %s succeeded on a sandbox that runs nothing: %.200q", r.Method, r.URL, w.Body)
		}
	})
}

// FuzzParseEntries: find's output (which the guest controls: file names)
// parses into entries whose paths are find's fields, never a panic.
func FuzzParseEntries(f *testing.F) {
	f.Add([]byte("f\x0012\x00644\x00root\x00root\x001700000000.5\x00/a\x00\x00"))
	f.Add([]byte("l\x000\x00777\x00u\x00g\x00\x00/l\x00/target\x00d\x004096\x004755\x00u\x00g\x001.\x00/d\x00\x00"))
	f.Add([]byte("x\x00-1\x009999999999999\x00\x00\x00.\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fields := strings.Split(string(b), "\x00")
		es := parseEntries(b)
		if len(es) != len(fields)/8 {
			t.Fatalf("%d entries from %d fields", len(es), len(fields))
		}
		for i, e := range es {
			if e.Path != fields[i*8+6] {
				t.Fatalf("entry %d path %q, field %q", i, e.Path, fields[i*8+6])
			}
		}
	})
}

// FuzzCheckSignature: a /files request passes only with the signature of
// its own path, operation, user and unexpired expiry under the token.
func FuzzCheckSignature(f *testing.F) {
	f.Add("/home/user/a", "user", "v1_x", "", "GET", true)
	f.Add("/etc/passwd", "root", "", "99999999999", "POST", true)
	f.Add("/a", "", "v1_", "1", "GET", false)
	const token = "tok"
	now := time.Unix(1_800_000_000, 0)
	f.Fuzz(func(t *testing.T, path, user, sig, exp, method string, sign bool) {
		if sign {
			op := "read"
			if method == http.MethodPost {
				op = "write"
			}
			var n int64
			for _, c := range exp {
				if c < '0' || c > '9' || n > 1e15 {
					n = -1
					break
				}
				n = n*10 + int64(c-'0')
			}
			if n >= 0 {
				sig = Signature(path, op, user, token, n)
			}
		}
		q := url.Values{"path": {path}, "username": {user}, "signature": {sig}}
		if exp != "" {
			q.Set("signature_expiration", exp)
		}
		r, err := http.NewRequest(method, "http://x/files?"+q.Encode(), nil)
		if err != nil {
			return
		}
		if !CheckSignature(r, token, now) {
			return
		}
		if sig == "" || CheckSignature(r, "other", now) {
			t.Fatalf("signature %q valid for any token", sig)
		}
		if exp != "" {
			if e, ok := parseInt(exp); !ok || e < now.Unix() {
				t.Fatalf("expired or malformed expiry %q accepted", exp)
			}
		}
	})
}

func parseInt(s string) (int64, bool) {
	var n int64
	if s == "" {
		return 0, false
	}
	neg := false
	if s[0] == '-' || s[0] == '+' {
		neg, s = s[0] == '-', s[1:]
	}
	for _, c := range s {
		if c < '0' || c > '9' || n > 1e17 {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}
