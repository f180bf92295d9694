package serve

import (
	"context"
	_ "embed"
	"fmt"
	"net/http"
	"time"

	"github.com/gvxrun/gvx/metrics"
	"github.com/gvxrun/gvx/serve/backend"
)

//go:embed openapi.json
var openapiDoc []byte

// apiMux is the control plane: E2B's routes and gvx's (/gvx/v1/…).
func (s *Service) apiMux() *http.ServeMux {
	m := http.NewServeMux()
	a := func(pattern string, h func(http.ResponseWriter, *http.Request, string)) {
		m.Handle(pattern, s.authed(h))
	}
	// E2B's control plane.
	a("POST /sandboxes", s.createHandler(15*time.Second))
	a("POST /v2/sandboxes", s.createHandler(300*time.Second))
	a("GET /sandboxes", s.listHandler(false))
	a("GET /v2/sandboxes", s.listHandler(true))
	a("GET /sandboxes/{id}", s.getHandler)
	a("DELETE /sandboxes/{id}", s.killHandler)
	a("POST /sandboxes/{id}/connect", s.connectHandler)
	a("POST /v2/sandboxes/{id}/connect", s.connectHandler)
	a("POST /sandboxes/{id}/resume", s.connectHandler)
	a("POST /sandboxes/{id}/timeout", s.timeoutHandler)
	a("POST /sandboxes/{id}/refreshes", s.refreshHandler)
	a("POST /sandboxes/{id}/pause", s.pauseHandler)
	a("GET /sandboxes/{id}/metrics", s.metricsHandler)
	a("POST /sandboxes/{id}/fork", s.forkHandler)
	a("POST /sandboxes/{id}/snapshots", s.snapshotsHandler)
	a("GET /snapshots", func(w http.ResponseWriter, r *http.Request, _ string) { noSnapshots(w) })
	a("PUT /sandboxes/{id}/network", s.updateNetworkHandler)
	// gvx's own routes.
	a("GET /gvx/v1/templates", s.listTemplates)
	a("POST /gvx/v1/templates", s.putTemplate)
	a("GET /gvx/v1/templates/{name}", s.getTemplate)
	a("DELETE /gvx/v1/templates/{name}", s.deleteTemplate)
	a("POST /gvx/v1/sandboxes/{id}/reset", s.resetHandler)
	a("POST /gvx/v1/sandboxes/{id}/checkpoints", s.checkpointHandler)
	a("POST /gvx/v1/sandboxes/{id}/rollback", s.rollbackHandler)
	a("POST /gvx/v1/sandboxes/{id}/fork", s.forkHandler)
	a("GET /gvx/v1/checkpoints", s.listCheckpoints)
	a("DELETE /gvx/v1/checkpoints/{handle}", s.releaseHandler)
	m.HandleFunc("GET /gvx/v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openapiDoc)
	})
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = fmt.Fprintln(w, "ok")
	})
	m.Handle("GET /metrics", s.metrics.Handler())
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, httpErrorf(http.StatusNotFound, "%s %s: no such route (E2B's API, /gvx/v1/…: see GET /gvx/v1/openapi.json)", r.Method, r.URL.Path))
	})
	return m
}

// snapshotsHandler is E2B's POST /sandboxes/{id}/snapshots: a 404 for a
// foreign id, else 501 (E2B's snapshots are templates made from a
// sandbox; gvx's checkpoints are at /gvx/v1/sandboxes/{id}/checkpoints).
func (s *Service) snapshotsHandler(w http.ResponseWriter, r *http.Request, key string) {
	if _, _, err := s.lookup(key, r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	noSnapshots(w)
}

func noSnapshots(w http.ResponseWriter) {
	writeError(w, httpErrorf(http.StatusNotImplemented, "E2B snapshots (templates made from a sandbox) are not served; gvx's checkpoints are: POST /gvx/v1/sandboxes/{id}/checkpoints, …/rollback, …/fork, DELETE /gvx/v1/checkpoints/{handle} (docs/serve.md)"))
}

func (s *Service) listTemplates(w http.ResponseWriter, _ *http.Request, _ string) {
	writeJSON(w, http.StatusOK, s.cfg.Templates.List())
}

func (s *Service) getTemplate(w http.ResponseWriter, r *http.Request, _ string) {
	t, ok := s.cfg.Templates.Get(r.PathValue("name"))
	if !ok {
		writeError(w, httpErrorf(http.StatusNotFound, "template '%s' not found", r.PathValue("name")))
		return
	}
	out := struct {
		backend.Template
		Pool *backend.PoolStatus `json:"pool,omitempty"`
	}{Template: t}
	if pr, ok := s.cfg.Backend.(backend.PoolReporter); ok {
		if st, has, err := pr.PoolStatus(r.Context(), t.Name); err == nil && has {
			out.Pool = &st
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Service) putTemplate(w http.ResponseWriter, r *http.Request, _ string) {
	var t backend.Template
	if err := s.readBody(w, r, &t); err != nil {
		writeError(w, err)
		return
	}
	if err := CheckTemplate(t); err != nil {
		writeError(w, httpErrorf(http.StatusBadRequest, "%v", err))
		return
	}
	if err := s.templateIdle(t.Name); err != nil {
		writeError(w, err)
		return
	}
	if p, ok := s.cfg.Backend.(backend.Preparer); ok {
		if err := p.Prepare(r.Context(), t); err != nil {
			writeError(w, httpErrorf(http.StatusBadRequest, "template %s: %v", t.Name, err))
			return
		}
	}
	if err := s.cfg.Templates.Put(t); err != nil {
		if _, fixed := err.(errFixed); fixed {
			writeError(w, httpErrorf(http.StatusConflict, "%v", err))
			return
		}
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, t)
}

func (s *Service) deleteTemplate(w http.ResponseWriter, r *http.Request, _ string) {
	name := r.PathValue("name")
	if err := s.templateIdle(name); err != nil {
		writeError(w, err)
		return
	}
	ok, err := s.cfg.Templates.Delete(name)
	switch {
	case !ok:
		writeError(w, httpErrorf(http.StatusNotFound, "template '%s' not found", name))
	case err != nil:
		if _, fixed := err.(errFixed); fixed {
			writeError(w, httpErrorf(http.StatusConflict, "%v", err))
			return
		}
		writeError(w, err)
	default:
		if p, ok := s.cfg.Backend.(backend.Preparer); ok {
			p.Forget(r.Context(), name)
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// resetHandler is POST /gvx/v1/sandboxes/{id}/reset: the sandbox is
// replaced by a new one from its template, under the same id, token and
// end time; running commands die with the old one.
func (s *Service) resetHandler(w http.ResponseWriter, r *http.Request, key string) {
	e, _, err := s.lookup(key, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.reset(r.Context(), e); err != nil {
		writeError(w, gone(err, e))
		return
	}
	s.mu.Lock()
	rec := e.rec
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, s.sandboxBody(rec))
}

func (s *Service) reset(ctx context.Context, e *entry) error {
	e.op.Lock()
	defer e.op.Unlock()
	s.mu.Lock()
	if e.gone {
		s.mu.Unlock()
		return errGone
	}
	rec := e.rec
	s.mu.Unlock()
	e.swap.Lock()
	defer e.swap.Unlock()
	e.envd.Close()
	if err := e.sb.Close(ctx); err != nil {
		_ = s.cfg.Backend.Destroy(ctx, rec.backing())
	}
	t0 := time.Now()
	sb, err := s.cfg.Backend.Create(ctx, rec.ID, e.tmpl, rec.createOptions(e.tmpl))
	s.metrics.Observe(metrics.OpReset, t0, err)
	if err != nil {
		s.mu.Lock()
		e.gone = true
		delete(s.boxes, rec.ID)
		s.mu.Unlock()
		s.save()
		_ = s.cfg.Backend.Destroy(context.WithoutCancel(ctx), rec.ID)
		return httpErrorf(http.StatusInternalServerError, "reset sandbox %s: %v (the sandbox is gone)", rec.ID, err)
	}
	s.mu.Lock()
	e.sb, e.envd = sb, s.newEnvd(e, sb, rec)
	e.rec.State, e.rec.StartedAt = Running, time.Now().UTC()
	e.rec.Backing = backingOf(sb, rec.ID) // a reset fork's backend id is the service's now (or a hot sandbox's)
	s.mu.Unlock()
	s.save()
	return nil
}

// templateIdle is a 409 while sandboxes of template name are alive (its
// pool, replaced or removed with it, holds them).
func (s *Service) templateIdle(name string) error {
	s.mu.Lock()
	n := 0
	for _, e := range s.boxes {
		if e.rec.Template == name {
			n++
		}
	}
	s.mu.Unlock()
	if n > 0 {
		return httpErrorf(http.StatusConflict, "template %s has %d sandboxes: kill them before changing or removing it", name, n)
	}
	return nil
}
