package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"time"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/serve/backend"
)

// ckRecord is a checkpoint the service keeps: whose it is and of which
// sandbox. A checkpoint lives until released or until the sandbox it was
// taken of is killed.
type ckRecord struct {
	Handle  string    `json:"handle"`
	Key     string    `json:"key"`
	Sandbox string    `json:"sandboxID"`
	Parent  string    `json:"parent,omitempty"`
	Created time.Time `json:"createdAt"`
}

// ckJSON is a checkpoint as the API returns it.
type ckJSON struct {
	Handle    string `json:"handle"`
	SandboxID string `json:"sandboxID"`
	Parent    string `json:"parent,omitempty"`
	CreatedAt string `json:"createdAt"`
}

func (c ckRecord) body() ckJSON {
	return ckJSON{Handle: c.Handle, SandboxID: c.Sandbox, Parent: c.Parent, CreatedAt: c.Created.Format(time.RFC3339Nano)}
}

// maxFork caps a fork's count.
const maxFork = 64

func (s *Service) ckPath() string { return filepath.Join(s.cfg.StateDir, "checkpoints.json") }

// flushCheckpoints writes the checkpoint table (under saveMu).
func (s *Service) flushCheckpoints() {
	s.mu.Lock()
	recs := make([]ckRecord, 0, len(s.cks))
	for _, c := range s.cks {
		recs = append(recs, c)
	}
	s.mu.Unlock()
	sort.Slice(recs, func(i, j int) bool { return recs[i].Handle < recs[j].Handle })
	if err := api.WriteJSON(s.ckPath(), recs); err != nil {
		log.L.WithError(err).Error("gvx serve: the checkpoint table could not be saved")
	}
}

// restoreCheckpoints loads the checkpoint table and releases the
// backend's checkpoints it does not know, and those whose sandbox is
// gone.
func (s *Service) restoreCheckpoints(ctx context.Context) error {
	f, ok := s.cfg.Backend.(backend.Forker)
	if !ok {
		return nil
	}
	var recs []ckRecord
	if err := readTable(s.ckPath(), "checkpoint", "checkpoints are then released", &recs); err != nil {
		return err
	}
	for _, c := range recs {
		if _, alive := s.boxes[c.Sandbox]; alive {
			s.cks[c.Handle] = c
		}
	}
	ids, err := f.Checkpoints(ctx)
	if err != nil {
		return fmt.Errorf("list the backend's checkpoints: %w", err)
	}
	for _, id := range ids {
		if _, known := s.cks[id]; !known {
			log.G(ctx).Infof("gvx serve: releasing checkpoint %s, which the table does not keep", id)
			if err := f.ReleaseCheckpoint(ctx, id); err != nil && !errors.Is(err, backend.ErrNoCheckpoint) {
				log.G(ctx).WithError(err).Warnf("gvx serve: release checkpoint %s", id)
			}
		}
	}
	return nil
}

// crError is a backend's checkpoint error as an HTTP error.
func crError(what string, err error) error {
	switch {
	case errors.Is(err, backend.ErrNoCheckpoint):
		return httpErrorf(http.StatusNotFound, "%s: %v", what, err)
	case errors.Is(err, backend.ErrForeignCheckpoint):
		return httpErrorf(http.StatusBadRequest, "%s: %v", what, err)
	case errors.Is(err, backend.ErrNotCheckpointable):
		return httpErrorf(http.StatusConflict, "%s: %v", what, err)
	}
	return httpErrorf(http.StatusInternalServerError, "%s: %v", what, err)
}

// checkpointer is e's sandbox's checkpoint interface, or a 501.
func (s *Service) checkpointer(e *entry) (backend.Checkpointer, backend.Forker, error) {
	c, ok1 := e.sb.(backend.Checkpointer)
	f, ok2 := s.cfg.Backend.(backend.Forker)
	if !ok1 || !ok2 {
		return nil, nil, httpErrorf(http.StatusNotImplemented, "this service's backend cannot checkpoint sandboxes")
	}
	return c, f, nil
}

// checkpoint saves e's sandbox for key (e.op held by the caller).
func (s *Service) checkpoint(ctx context.Context, key string, e *entry, async bool) (ckRecord, error) {
	c, _, err := s.checkpointer(e)
	if err != nil {
		return ckRecord{}, err
	}
	s.mu.Lock()
	st, gone, id := e.rec.State, e.gone, e.rec.ID
	s.mu.Unlock()
	if gone {
		return ckRecord{}, errGone
	}
	if st == Paused {
		return ckRecord{}, httpErrorf(http.StatusConflict, "sandbox %s is paused: resume it (connect) before a checkpoint", id)
	}
	ck, err := c.Checkpoint(ctx, async)
	if err != nil {
		return ckRecord{}, crError("checkpoint sandbox "+id, err)
	}
	rec := ckRecord{Handle: ck.ID, Key: key, Sandbox: id, Parent: ck.Parent, Created: ck.Created}
	if rec.Created.IsZero() {
		rec.Created = time.Now().UTC()
	}
	s.mu.Lock()
	s.cks[rec.Handle] = rec
	s.mu.Unlock()
	s.save()
	return rec, nil
}

// ownCheckpoint is checkpoint handle of key, or a 404.
func (s *Service) ownCheckpoint(key, handle string) (ckRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cks[handle]
	if !ok || c.Key != key {
		return ckRecord{}, httpErrorf(http.StatusNotFound, "checkpoint %s not found", handle)
	}
	return c, nil
}

// checkpointHandler is POST /gvx/v1/sandboxes/{id}/checkpoints
// {"async": bool} → 201 the checkpoint.
func (s *Service) checkpointHandler(w http.ResponseWriter, r *http.Request, key string) {
	var req struct {
		Async bool `json:"async"`
	}
	e := s.entryAndBody(w, r, key, &req)
	if e == nil {
		return
	}
	e.op.Lock()
	rec, err := s.checkpoint(r.Context(), key, e, req.Async)
	e.op.Unlock()
	if err != nil {
		writeError(w, gone(err, e))
		return
	}
	writeJSON(w, http.StatusCreated, rec.body())
}

// rollbackHandler is POST /gvx/v1/sandboxes/{id}/rollback {"handle"} →
// 200 the sandbox, in the checkpoint's state, same id and token.
func (s *Service) rollbackHandler(w http.ResponseWriter, r *http.Request, key string) {
	var req struct {
		Handle string `json:"handle"`
	}
	e := s.entryAndBody(w, r, key, &req)
	if e == nil {
		return
	}
	if req.Handle == "" {
		writeError(w, httpErrorf(http.StatusBadRequest, "handle is missing: name the checkpoint to roll back to"))
		return
	}
	if _, err := s.ownCheckpoint(key, req.Handle); err != nil {
		writeError(w, err)
		return
	}
	c, _, err := s.checkpointer(e)
	if err != nil {
		writeError(w, err)
		return
	}
	e.op.Lock()
	defer e.op.Unlock()
	s.mu.Lock()
	rec, isGone, st := e.rec, e.gone, e.rec.State
	s.mu.Unlock()
	switch {
	case isGone:
		writeError(w, gone(errGone, e))
		return
	case st == Paused:
		writeError(w, httpErrorf(http.StatusConflict, "sandbox %s is paused: resume it (connect) before a rollback", rec.ID))
		return
	}
	e.swap.Lock()
	err = c.Rollback(r.Context(), req.Handle)
	e.swap.Unlock()
	if err != nil {
		writeError(w, crError("roll back sandbox "+rec.ID, err))
		return
	}
	// The network policy is the service's setting, not the sandbox's
	// state: the narrowing asked last stays (the checkpoint's may be
	// older).
	if err := s.narrow(r.Context(), e.tmpl, e.sb, rec.Network); err != nil {
		writeError(w, httpErrorf(http.StatusInternalServerError, "sandbox %s was rolled back, but its network narrowing could not be set again: %v", rec.ID, err))
		return
	}
	writeJSON(w, http.StatusOK, s.sandboxBody(rec))
}

// forkHandler is gvx's POST /gvx/v1/sandboxes/{id}/fork {"count",
// "handle", "timeout"} and E2B's POST /sandboxes/{id}/fork {"count",
// "timeout"}: count new sandboxes in the state of checkpoint handle (of
// the sandbox now when no handle is given), each of the key's, of the
// sandbox's template, with its metadata and env, and a token of its own
// → 201 the sandboxes.
func (s *Service) forkHandler(w http.ResponseWriter, r *http.Request, key string) {
	var req struct {
		Count   *int   `json:"count"`
		Handle  string `json:"handle"`
		Timeout *int64 `json:"timeout"`
	}
	e := s.entryAndBody(w, r, key, &req)
	if e == nil {
		return
	}
	n := 1
	if req.Count != nil {
		n = *req.Count
	}
	if n < 1 || n > maxFork {
		writeError(w, httpErrorf(http.StatusBadRequest, "count %d: give 1 to %d", n, maxFork))
		return
	}
	d, err := s.timeout(req.Timeout, 300*time.Second)
	if err != nil {
		writeError(w, err)
		return
	}
	_, f, err := s.checkpointer(e)
	if err != nil {
		writeError(w, err)
		return
	}
	handle := req.Handle
	if handle != "" {
		if _, err := s.ownCheckpoint(key, handle); err != nil {
			writeError(w, err)
			return
		}
	} else {
		// A checkpoint of its own, released once the forks run.
		e.op.Lock()
		ck, err := s.checkpoint(r.Context(), key, e, false)
		e.op.Unlock()
		if err != nil {
			writeError(w, gone(err, e))
			return
		}
		handle = ck.Handle
		defer s.release(context.WithoutCancel(r.Context()), handle)
	}
	s.mu.Lock()
	parent := e.rec
	s.mu.Unlock()
	sbs, err := f.Fork(r.Context(), handle, n)
	if err != nil {
		writeError(w, crError("fork sandbox "+parent.ID, err))
		return
	}
	// Forks have the parent's network narrowing, as its record says
	// (the checkpoint's may be older, or another sandbox's).
	for _, sb := range sbs {
		if err = s.narrow(r.Context(), e.tmpl, sb, parent.Network); err != nil {
			break
		}
	}
	if err != nil {
		for _, sb := range sbs {
			_ = sb.Close(context.WithoutCancel(r.Context()))
		}
		writeError(w, httpErrorf(http.StatusInternalServerError, "fork sandbox %s: the forks' network narrowing could not be set (they are removed): %v", parent.ID, err))
		return
	}
	now := time.Now()
	out := make([]sandboxJSON, 0, len(sbs))
	s.mu.Lock()
	for _, sb := range sbs {
		rec := record{ID: newID(), Key: key, Template: parent.Template, Metadata: parent.Metadata, EnvVars: parent.EnvVars, Network: parent.Network,
			Token: newToken(), StartedAt: now.UTC(), EndAt: now.Add(d).UTC(), State: Running, OnTimeout: parent.OnTimeout}
		if id, ok := sb.(backend.Identified); ok {
			rec.Backing = id.BackendID()
		}
		if parent.TrafficToken != "" {
			rec.TrafficToken = newToken() // private as its parent, with a token of its own
		}
		fe := &entry{rec: rec, tmpl: e.tmpl, sb: sb}
		fe.envd = s.newEnvd(fe, sb, rec)
		s.boxes[rec.ID] = fe
		out = append(out, s.sandboxBody(rec))
	}
	s.mu.Unlock()
	s.save()
	writeJSON(w, http.StatusCreated, out)
}

// listCheckpoints is GET /gvx/v1/checkpoints[?sandboxID=]: the key's.
func (s *Service) listCheckpoints(w http.ResponseWriter, r *http.Request, key string) {
	sb := r.URL.Query().Get("sandboxID")
	s.mu.Lock()
	out := []ckJSON{}
	for _, c := range s.cks {
		if c.Key == key && (sb == "" || c.Sandbox == sb) {
			out = append(out, c.body())
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt < out[j].CreatedAt })
	writeJSON(w, http.StatusOK, out)
}

// releaseHandler is DELETE /gvx/v1/checkpoints/{handle} → 204.
func (s *Service) releaseHandler(w http.ResponseWriter, r *http.Request, key string) {
	h := r.PathValue("handle")
	if _, err := s.ownCheckpoint(key, h); err != nil {
		writeError(w, err)
		return
	}
	if err := s.release(r.Context(), h); err != nil {
		writeError(w, crError("release checkpoint "+h, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// release deletes checkpoint h from the backend and the table.
func (s *Service) release(ctx context.Context, h string) error {
	f, ok := s.cfg.Backend.(backend.Forker)
	if !ok {
		return nil
	}
	err := f.ReleaseCheckpoint(ctx, h)
	if errors.Is(err, backend.ErrNoCheckpoint) {
		err = nil
	}
	if err == nil {
		s.mu.Lock()
		delete(s.cks, h)
		s.mu.Unlock()
		s.save()
	}
	return err
}

// releaseOf releases the checkpoints taken of sandbox id (it was killed).
func (s *Service) releaseOf(ctx context.Context, id string) {
	s.mu.Lock()
	var hs []string
	for h, c := range s.cks {
		if c.Sandbox == id {
			hs = append(hs, h)
		}
	}
	s.mu.Unlock()
	for _, h := range hs {
		if err := s.release(ctx, h); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx serve: release checkpoint %s of killed sandbox %s", h, id)
		}
	}
}
