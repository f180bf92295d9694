package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/serve/backend"
	"github.com/gvxrun/gvx/serve/envd"
)

// httpError is an error with the status and message the client gets as
// E2B's error body {"code": status, "message": ...}.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func httpErrorf(status int, format string, a ...any) error {
	return &httpError{status: status, msg: fmt.Sprintf(format, a...)}
}

// writeError sends err as E2B's error body.
func writeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	var he *httpError
	if errors.As(err, &he) {
		status = he.status
	}
	writeJSON(w, status, map[string]any{"code": status, "message": err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// readBody decodes the request's JSON body into v: an empty body leaves v
// as is; a body over the limit, malformed JSON, or trailing data is a 400
// (413 for the size) naming what is wrong.
func (s *Service) readBody(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return httpErrorf(http.StatusRequestEntityTooLarge, "request body over %d bytes", s.cfg.MaxBody)
		}
		return httpErrorf(http.StatusBadRequest, "read request body: %v", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return httpErrorf(http.StatusBadRequest, "malformed JSON body: %v", err)
	}
	if dec.More() {
		return httpErrorf(http.StatusBadRequest, "malformed JSON body: data after the JSON value")
	}
	return nil
}

// EnvdPort is the port the SDKs address envd on.
const EnvdPort = "49983"

// hostRoute is the <port>-<sandbox id>.<domain> form of a Host.
var hostRoute = regexp.MustCompile(`^(\d+)-([a-z0-9]+)\.`)

// Handler is the service's one HTTP handler: envd requests (by the
// E2b-Sandbox-Id header or the Host) go to the sandbox's envd, the rest to
// the control plane and gvx's routes.
func (s *Service) Handler() http.Handler {
	api := s.apiMux()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		rw := &statusWriter{ResponseWriter: w, status: 200}
		id, port := r.Header.Get("E2b-Sandbox-Id"), r.Header.Get("E2b-Sandbox-Port")
		if id == "" {
			if m := hostRoute.FindStringSubmatch(r.Host); m != nil {
				port, id = m[1], m[2]
			}
		}
		route := "api"
		if id != "" {
			route = "envd"
			s.serveEnvd(rw, r, id, port)
		} else {
			api.ServeHTTP(rw, r)
		}
		s.metrics.request(route, rw.status, time.Since(t0))
		log.G(r.Context()).Debugf("gvx serve: %s %s %s: %d in %s", route, r.Method, r.URL.Path, rw.status, time.Since(t0))
		if rw.status >= 500 && rw.status != http.StatusNotImplemented && rw.status != http.StatusBadGateway {
			log.G(r.Context()).Warnf("gvx serve: %s %s: %d", r.Method, r.URL.Path, rw.status)
		}
	})
}

// statusWriter records the status; it passes Flush through for streams.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// notFound is what E2B's proxy answers for a sandbox it cannot reach;
// the SDKs read 502 from /health as "not running".
func notFound(w http.ResponseWriter, id, msg string) {
	writeJSON(w, http.StatusBadGateway, map[string]any{"code": http.StatusBadGateway, "message": msg, "sandboxId": id})
}

func (s *Service) serveEnvd(w http.ResponseWriter, r *http.Request, id, port string) {
	s.mu.Lock()
	e, ok := s.boxes[id]
	s.mu.Unlock()
	if ok && (port == "" || port == EnvdPort) && fileCall(r) {
		e.swap.RLock()
		defer e.swap.RUnlock()
	}
	var rec record
	var srv *envd.Server
	var sb backend.Sandbox
	var tmpl backend.Template
	s.mu.Lock()
	if ok {
		rec, srv, sb, tmpl = e.rec, e.envd, e.sb, e.tmpl
		ok = !e.gone
	}
	s.mu.Unlock()
	if !ok {
		notFound(w, id, "The sandbox was not found")
		return
	}
	if rec.State == Paused {
		notFound(w, id, "The sandbox is paused: connect to it (Sandbox.connect) to resume it")
		return
	}
	if port != "" && port != EnvdPort {
		s.servePort(w, r, sb, tmpl, rec, port)
		return
	}
	if !s.envdAuthorized(r, rec) {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"code": http.StatusUnauthorized,
			"message": "unauthorized access, please provide a valid access token or method signing if supported"})
		return
	}
	srv.ServeHTTP(w, r)
}

// fileCall says whether r is one of envd's file calls (a transfer, or a
// unary filesystem call: not WatchDir's stream), which a rollback or a
// reset of the sandbox waits for, and which wait for them (entry.swap).
func fileCall(r *http.Request) bool {
	switch r.URL.Path {
	case "/files", "/filesystem.Filesystem/Stat", "/filesystem.Filesystem/ListDir", "/filesystem.Filesystem/MakeDir",
		"/filesystem.Filesystem/Move", "/filesystem.Filesystem/Remove":
		return true
	}
	return false
}

// envdAuthorized checks X-Access-Token; /health needs none, and /files
// takes a signature instead.
func (s *Service) envdAuthorized(r *http.Request, rec record) bool {
	if r.URL.Path == "/health" {
		return true
	}
	if tok := r.Header.Get("X-Access-Token"); tok != "" {
		return tok == rec.Token
	}
	if r.URL.Path == "/files" {
		return envd.CheckSignature(r, rec.Token, time.Now())
	}
	return false
}

// key is the request's API key's id ("" if none or unknown).
func (s *Service) key(r *http.Request) string {
	k := r.Header.Get("X-API-KEY")
	if k == "" {
		if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
			k = strings.TrimPrefix(a, "Bearer ")
		}
	}
	return s.cfg.Keys.Check(k)
}
