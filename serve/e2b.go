package serve

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gvxrun/gvx/serve/envd"
)

// ClientID is the constant E2B's deprecated clientID field gets.
const ClientID = "gvx"

// newSandbox is E2B's NewSandbox (v1) and NewSandboxV2 body; the fields
// gvx has no use for (mcp, volumes, …) are accepted and ignored.
type newSandbox struct {
	TemplateID string            `json:"templateID"`
	Timeout    *int64            `json:"timeout"`
	Metadata   map[string]string `json:"metadata"`
	EnvVars    map[string]string `json:"envVars"`
	AutoPause  bool              `json:"autoPause"`
	// AllowInternetAccess and Network narrow a NAT template's egress
	// policy (networkRequest).
	AllowInternetAccess *bool        `json:"allow_internet_access"`
	Network             *networkJSON `json:"network"`
}

// sandboxJSON is E2B's Sandbox (the create and connect answer).
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// detailJSON is E2B's SandboxDetail and ListedSandbox.
type detailJSON struct {
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       string            `json:"startedAt"`
	EndAt           string            `json:"endAt"`
	CPUCount        int64             `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	State           State             `json:"state"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	Domain          *string           `json:"domain,omitempty"`
	Lifecycle       *lifecycleJSON    `json:"lifecycle,omitempty"`
	// AllowInternetAccess says whether the sandbox's flows may leave at
	// all (a NAT template's, not narrowed to nothing by the create).
	AllowInternetAccess bool         `json:"allowInternetAccess"`
	Network             *networkJSON `json:"network,omitempty"`
}

type lifecycleJSON struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

func (s *Service) domain() *string {
	if s.cfg.Domain == "" {
		return nil
	}
	d := s.cfg.Domain
	return &d
}

func (s *Service) sandboxBody(rec record) sandboxJSON {
	out := sandboxJSON{TemplateID: rec.Template, SandboxID: rec.ID, Alias: rec.Template, ClientID: ClientID,
		EnvdVersion: envd.Version, EnvdAccessToken: rec.Token, Domain: s.domain()}
	if rec.TrafficToken != "" {
		tok := rec.TrafficToken
		out.TrafficAccessToken = &tok
	}
	return out
}

func (s *Service) detail(e *entry, rec record, full bool) detailJSON {
	cpus := (e.tmpl.CPUMillis + 999) / 1000
	if cpus == 0 {
		cpus = 1
	}
	d := detailJSON{TemplateID: rec.Template, Alias: rec.Template, SandboxID: rec.ID, ClientID: ClientID,
		StartedAt: rec.StartedAt.Format(time.RFC3339Nano), EndAt: rec.EndAt.Format(time.RFC3339Nano),
		CPUCount: cpus, MemoryMB: e.tmpl.MemoryMB, DiskSizeMB: e.tmpl.DiskMB, State: rec.State,
		EnvdVersion: envd.Version, Metadata: rec.Metadata, AllowInternetAccess: rec.Network.internet(e.tmpl)}
	if full {
		d.EnvdAccessToken = rec.Token
		d.Domain = s.domain()
		d.Lifecycle = &lifecycleJSON{OnTimeout: rec.OnTimeout}
		d.Network = rec.Network.json()
	}
	return d
}

// timeout checks a request's timeout in seconds (def when absent).
func (s *Service) timeout(secs *int64, def time.Duration) (time.Duration, error) {
	if secs == nil {
		return def, nil
	}
	d := time.Duration(*secs) * time.Second
	if *secs < 0 || d > s.cfg.MaxTimeout {
		return 0, httpErrorf(http.StatusBadRequest, "timeout %d s: give 0 to %d seconds", *secs, int64(s.cfg.MaxTimeout/time.Second))
	}
	return d, nil
}

// authed wraps a control-plane handler with the API key check.
func (s *Service) authed(h func(w http.ResponseWriter, r *http.Request, key string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := s.key(r)
		if key == "" {
			writeError(w, httpErrorf(http.StatusUnauthorized, "Invalid API key: send a key of the service's keys file in the X-API-KEY header (E2B_API_KEY for the SDKs)"))
			return
		}
		h(w, r, key)
	}
}

// createHandler is POST /sandboxes (v1: default timeout 15 s) and POST
// /v2/sandboxes (300 s).
func (s *Service) createHandler(def time.Duration) func(http.ResponseWriter, *http.Request, string) {
	return func(w http.ResponseWriter, r *http.Request, key string) {
		var req newSandbox
		if err := s.readBody(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		if req.TemplateID == "" {
			writeError(w, httpErrorf(http.StatusBadRequest, "templateID is missing: name the template to create the sandbox from"))
			return
		}
		d, err := s.timeout(req.Timeout, def)
		if err != nil {
			writeError(w, err)
			return
		}
		onTimeout := "kill"
		if req.AutoPause {
			onTimeout = "pause"
		}
		nw, err := parseNetwork(req.AllowInternetAccess, req.Network)
		if err != nil {
			writeError(w, err)
			return
		}
		private := req.Network != nil && req.Network.AllowPublicTraffic != nil && !*req.Network.AllowPublicTraffic
		e, err := s.create(r.Context(), key, createSpec{Template: req.TemplateID, Timeout: d, Metadata: req.Metadata, EnvVars: req.EnvVars, OnTimeout: onTimeout,
			Network: nw, Private: private})
		if err != nil {
			writeError(w, err)
			return
		}
		s.mu.Lock()
		rec := e.rec
		s.mu.Unlock()
		writeJSON(w, http.StatusCreated, s.sandboxBody(rec))
	}
}

// connectHandler is POST /sandboxes/{id}/connect, /v2/…/connect and the
// deprecated /resume: 201 after resuming a paused sandbox, 200 for a
// running one, whose end time is only ever extended.
func (s *Service) connectHandler(w http.ResponseWriter, r *http.Request, key string) {
	e, d, ok := s.sandboxAndTimeout(w, r, key, 300*time.Second, false)
	if !ok {
		return
	}
	resumed, err := s.resume(r.Context(), e)
	if err != nil {
		writeError(w, gone(err, e))
		return
	}
	s.setEnd(e, d, true)
	s.mu.Lock()
	rec := e.rec
	s.mu.Unlock()
	status := http.StatusOK
	if resumed {
		status = http.StatusCreated
	}
	writeJSON(w, status, s.sandboxBody(rec))
}

// sandboxAndTimeout reads a {"timeout": s} (or refreshes' {"duration":
// s}) body and finds the key's sandbox of the path; on an error it
// answers and returns false.
func (s *Service) sandboxAndTimeout(w http.ResponseWriter, r *http.Request, key string, def time.Duration, required bool) (*entry, time.Duration, bool) {
	var req struct {
		Timeout  *int64 `json:"timeout"`
		Duration *int64 `json:"duration"`
	}
	if err := s.readBody(w, r, &req); err != nil {
		writeError(w, err)
		return nil, 0, false
	}
	secs := req.Timeout
	if secs == nil {
		secs = req.Duration
	}
	if secs == nil && required {
		writeError(w, httpErrorf(http.StatusBadRequest, "timeout is missing: give the seconds from now the sandbox should live"))
		return nil, 0, false
	}
	d, err := s.timeout(secs, def)
	if err != nil {
		writeError(w, err)
		return nil, 0, false
	}
	e, _, err := s.lookup(key, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return nil, 0, false
	}
	return e, d, true
}

// gone turns errGone into the 404 of a sandbox killed meanwhile.
func gone(err error, e *entry) error {
	if errors.Is(err, errGone) {
		return httpErrorf(http.StatusNotFound, "sandbox %s not found", e.rec.ID)
	}
	return err
}

func (s *Service) getHandler(w http.ResponseWriter, r *http.Request, key string) {
	e, rec, err := s.lookup(key, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.detail(e, rec, true))
}

func (s *Service) killHandler(w http.ResponseWriter, r *http.Request, key string) {
	e, _, err := s.lookup(key, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.kill(context.WithoutCancel(r.Context()), e); err != nil {
		writeError(w, gone(err, e))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Service) timeoutHandler(w http.ResponseWriter, r *http.Request, key string) {
	e, d, ok := s.sandboxAndTimeout(w, r, key, 0, true)
	if !ok {
		return
	}
	s.setEnd(e, d, false)
	w.WriteHeader(http.StatusNoContent)
}

// refreshHandler is POST /sandboxes/{id}/refreshes {"duration": s}.
func (s *Service) refreshHandler(w http.ResponseWriter, r *http.Request, key string) {
	e, d, ok := s.sandboxAndTimeout(w, r, key, 60*time.Second, false)
	if !ok {
		return
	}
	s.setEnd(e, d, true)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Service) pauseHandler(w http.ResponseWriter, r *http.Request, key string) {
	var req struct{}
	if err := s.readBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	e, _, err := s.lookup(key, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	switch err := s.pause(r.Context(), e); {
	case errors.Is(err, errState):
		writeError(w, httpErrorf(http.StatusConflict, "sandbox %s is already paused", e.rec.ID))
	case err != nil:
		writeError(w, gone(err, e))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// metricsHandler is GET /sandboxes/{id}/metrics: the sandbox's use now.
func (s *Service) metricsHandler(w http.ResponseWriter, r *http.Request, key string) {
	e, rec, err := s.lookup(key, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := []map[string]any{}
	if rec.State == Running {
		st, err := e.sb.Stats(r.Context())
		if err == nil {
			now := time.Now().UTC()
			out = append(out, map[string]any{
				"timestamp": now.Format(time.RFC3339), "timestampUnix": now.Unix(),
				"cpuCount": st.CPUCount, "cpuUsedPct": st.CPUUsedPct,
				"memUsed": st.MemUsed, "memTotal": st.MemTotal, "memCache": st.MemCache,
				"diskUsed": st.DiskUsed, "diskTotal": st.DiskTotal,
			})
		}
	}
	writeJSON(w, http.StatusOK, out)
}
