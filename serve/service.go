// Package serve is gvx serve: a sandbox service speaking E2B's API.
//
// One HTTP handler serves E2B's control plane (create, connect, list,
// timeout, pause, kill, metrics), E2B's in-sandbox protocol (envd, package
// serve/envd, routed by the E2b-Sandbox-Id header or a <port>-<id>.<domain>
// Host), and gvx's own routes under /gvx/v1 (templates, reset, checkpoint,
// rollback, fork). Sandboxes come from a backend (serve/gvxbackend: gvx's
// Go SDK). The service keeps its sandbox and checkpoint tables in its
// state directory and, when it starts again, re-adopts the sandboxes that
// still run and removes the rest.
package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/randid"
	"github.com/gvxrun/gvx/metrics"
	"github.com/gvxrun/gvx/serve/backend"
	"github.com/gvxrun/gvx/serve/envd"
)

// Config configures a Service.
type Config struct {
	Backend   backend.Backend
	Keys      *Keys
	Templates *Templates
	// StateDir holds the sandbox table (sandboxes.json) and the API's
	// templates (templates.json).
	StateDir string
	// Domain, if set, is returned as the sandboxes' domain, so that the
	// SDKs' getHost(port) is <port>-<id>.<Domain>.
	Domain string
	// MaxTimeout caps a sandbox's timeout (default 24 h); PausedTimeout is
	// how long a sandbox paused at its end time is kept (default 1 h).
	MaxTimeout, PausedTimeout time.Duration
	// MaxBody is the largest control-plane request body (default 1 MiB).
	MaxBody int64
}

// State is a sandbox's state.
type State string

// The states E2B knows.
const (
	Running State = "running"
	Paused  State = "paused"
)

// record is a sandbox's row of the table, as kept on disk.
type record struct {
	ID        string            `json:"sandboxID"`
	Key       string            `json:"key"` // keyID of the creating key
	Template  string            `json:"templateID"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	EnvVars   map[string]string `json:"envVars,omitempty"`
	Token     string            `json:"envdAccessToken"`
	StartedAt time.Time         `json:"startedAt"`
	EndAt     time.Time         `json:"endAt"`
	State     State             `json:"state"`
	OnTimeout string            `json:"onTimeout"` // kill or pause
	// Backing is the backend's id of the sandbox when it is not ID (a
	// fork's, or a hot sandbox's handed over at its create).
	Backing string `json:"backing,omitempty"`
	// Network is what the create asked of the network (E2B's
	// allow_internet_access and network), kept for resets and details.
	Network *networkRequest `json:"network,omitempty"`
	// TrafficToken, when set (allowPublicTraffic: false), is what a
	// request to one of the sandbox's ports must carry in the
	// e2b-traffic-access-token header.
	TrafficToken string `json:"trafficAccessToken,omitempty"`
}

// createOptions are the backend's options of a create (or a reset) of r.
func (r record) createOptions(t backend.Template) backend.CreateOptions {
	return backend.CreateOptions{Env: envList(r.EnvVars), Narrow: r.Network.narrow(t)}
}

// backingOf is the Backing of sandbox sb made for id: the backend's id
// of it when that is not id (a hot sandbox's, handed over at a create).
func backingOf(sb backend.Sandbox, id string) string {
	if b, ok := sb.(backend.Identified); ok && b.BackendID() != id {
		return b.BackendID()
	}
	return ""
}

// backing is the backend's id of the sandbox.
func (r record) backing() string {
	if r.Backing != "" {
		return r.Backing
	}
	return r.ID
}

// entry is a sandbox the service holds.
type entry struct {
	op sync.Mutex // serialises pause, resume, reset and kill
	// swap is held by a rollback or a reset while it replaces the
	// sandbox's state, and read-held by envd's file calls: a file call
	// runs wholly before or after one, never cut by it.
	swap     sync.RWMutex
	rec      record // guarded by Service.mu
	tmpl     backend.Template
	sb       backend.Sandbox
	envd     *envd.Server
	gone     bool // killed; guarded by Service.mu
	expiring bool // the reaper is at it; guarded by Service.mu
}

// Service is a running gvx serve.
type Service struct {
	cfg     Config
	metrics *serviceMetrics

	mu    sync.Mutex
	boxes map[string]*entry
	cks   map[string]ckRecord // checkpoints by handle

	saveMu sync.Mutex
	dirty  chan struct{} // the table changed
	saved  chan struct{} // the saver is done
	stop   chan struct{}
	done   chan struct{}
	expiry sync.WaitGroup // expire calls under way
	// leftovers are the backend sandboxes the start (restore) does not
	// adopt, which retryRemovals removes.
	leftovers []string
	retrying  sync.WaitGroup
}

// A start's removals that fail (a backend call timed out while a crash's
// half-made sandbox settled) are tried again every removeRetryEvery, up to
// removeRetries times, then left to the janitor.
var (
	removeRetryEvery = 2 * time.Second
	removeRetries    = 30
)

// New starts a service: it loads the sandbox table, re-adopts the
// sandboxes that still run, starts the removal of the others (and of any
// sandbox of the backend the table does not know) in the background, and
// starts the reaper of end times.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.MaxTimeout == 0 {
		cfg.MaxTimeout = 24 * time.Hour
	}
	if cfg.PausedTimeout == 0 {
		cfg.PausedTimeout = time.Hour
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = 1 << 20
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	s := &Service{cfg: cfg, boxes: map[string]*entry{}, cks: map[string]ckRecord{}, stop: make(chan struct{}), done: make(chan struct{}),
		dirty: make(chan struct{}, 1), saved: make(chan struct{})}
	s.metrics = newMetrics(s)
	if err := s.restore(ctx); err != nil {
		return nil, err
	}
	go s.reaper()
	go s.saver()
	if len(s.leftovers) > 0 {
		s.retrying.Add(1)
		go s.retryRemovals(context.WithoutCancel(ctx), s.leftovers)
	}
	return s, nil
}

// retryRemovals removes the backend sandboxes ids the start found and
// does not adopt — in the background, so that the service answers at once
// however long a removal of a crash's leftovers takes — trying again every
// removeRetryEvery until they are gone, the service stops, or it has tried
// removeRetries times.
func (s *Service) retryRemovals(ctx context.Context, ids []string) {
	defer s.retrying.Done()
	for try := 1; len(ids) > 0; try++ {
		wait := removeRetryEvery
		if try == 1 {
			wait = 0
		}
		select {
		case <-s.stop:
			return
		case <-time.After(wait):
		}
		var left []string
		for _, id := range ids {
			if err := s.cfg.Backend.Destroy(ctx, id); err != nil {
				if try >= removeRetries {
					log.G(ctx).WithError(err).Warnf("gvx serve: sandbox %s of an earlier run could not be removed after %d tries; the janitor's sweep reclaims it", id, try)
					continue
				}
				left = append(left, id)
				continue
			}
			log.G(ctx).Infof("gvx serve: removed sandbox %s of an earlier run (try %d)", id, try)
		}
		ids = left
	}
}

func (s *Service) tablePath() string { return filepath.Join(s.cfg.StateDir, "sandboxes.json") }

// save has the saver write the table soon: writes are coalesced and off
// the request path (a rename over the table can wait for the disk). A
// crash before the write loses at most the last changes: a sandbox the
// table then lacks is removed at the next start, never orphaned.
func (s *Service) save() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// saver writes the table when it is dirty, until the service closes.
func (s *Service) saver() {
	defer close(s.saved)
	for {
		select {
		case <-s.dirty:
			s.flush()
		case <-s.stop:
			return
		}
	}
}

// flush writes the table now.
func (s *Service) flush() {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	s.mu.Lock()
	recs := make([]record, 0, len(s.boxes))
	for _, e := range s.boxes {
		recs = append(recs, e.rec)
	}
	s.mu.Unlock()
	sort.Slice(recs, func(i, j int) bool { return recs[i].ID < recs[j].ID })
	if err := api.WriteJSON(s.tablePath(), recs); err != nil {
		log.L.WithError(err).Error("gvx serve: the sandbox table could not be saved; a restart may leave sandboxes behind")
	}
	s.flushCheckpoints()
}

// readTable reads the JSON table at path into v (nothing if there is
// none); what names it in errors, and gone what a fresh start does to its
// rows.
func readTable(path, what, gone string, v any) error {
	b, err := os.ReadFile(path)
	switch {
	case os.IsNotExist(err):
		return nil
	case err != nil:
		return fmt.Errorf("%s table: %w", what, err)
	}
	if err := jsonUnmarshal(b, v); err != nil {
		return fmt.Errorf("%s table %s: %w (move it away to start afresh; its %s)", what, path, err, gone)
	}
	return nil
}

// restore re-adopts or removes what an earlier process left.
func (s *Service) restore(ctx context.Context) error {
	var recs []record
	if err := readTable(s.tablePath(), "sandbox", "sandboxes are then removed", &recs); err != nil {
		return err
	}
	known := map[string]bool{}
	for _, r := range recs {
		t, ok := s.cfg.Templates.Get(r.Template)
		var sb backend.Sandbox
		var err error
		if ok {
			sb, err = s.cfg.Backend.Attach(ctx, r.backing(), t)
		} else {
			err = fmt.Errorf("template %s is gone", r.Template)
		}
		// Known: adopted, or already to be removed.
		known[r.backing()] = true
		if err != nil {
			log.G(ctx).WithError(err).Infof("gvx serve: sandbox %s of the last run is not adopted; removing it in the background", r.ID)
			s.leftovers = append(s.leftovers, r.backing())
			continue
		}
		e := &entry{rec: r, tmpl: t, sb: sb}
		e.envd = s.newEnvd(e, sb, r)
		s.boxes[r.ID] = e
		log.G(ctx).Infof("gvx serve: re-adopted sandbox %s (%s, %s until %s)", r.ID, r.Template, r.State, r.EndAt.Format(time.RFC3339))
	}
	ids, err := s.cfg.Backend.List(ctx)
	if err != nil {
		return fmt.Errorf("list the backend's sandboxes: %w", err)
	}
	for _, id := range ids {
		if !known[id] {
			log.G(ctx).Infof("gvx serve: removing sandbox %s, which the table does not know, in the background", id)
			s.leftovers = append(s.leftovers, id)
		}
	}
	if err := s.restoreCheckpoints(ctx); err != nil {
		return err
	}
	s.flush()
	return nil
}

func defaults(t backend.Template, r record) envd.Defaults {
	return envd.Defaults{User: t.User, Workdir: t.Workdir, Env: envList(r.EnvVars)}
}

// envList is m as K=V, sorted.
func envList(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Close stops the reaper and the sandboxes' streams. The sandboxes keep
// running: the next service re-adopts them (or removes them at their end
// time). With kill set, they are removed now.
func (s *Service) Close(ctx context.Context, kill bool) {
	close(s.stop)
	<-s.done
	s.expiry.Wait()
	s.retrying.Wait()
	<-s.saved
	defer s.flush()
	s.mu.Lock()
	var es []*entry
	for _, e := range s.boxes {
		es = append(es, e)
	}
	s.mu.Unlock()
	for _, e := range es {
		if kill {
			_ = s.kill(ctx, e)
		} else {
			e.envd.Close()
		}
	}
}

// reaper ends sandboxes at their end time: kill, or pause if asked to.
func (s *Service) reaper() {
	defer close(s.done)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		var due []*entry
		s.mu.Lock()
		for _, e := range s.boxes {
			if !e.gone && !e.expiring && !e.rec.EndAt.After(now) {
				e.expiring = true
				due = append(due, e)
			}
		}
		s.mu.Unlock()
		for _, e := range due {
			s.expiry.Add(1)
			go func() {
				defer s.expiry.Done()
				s.expire(e)
			}()
		}
	}
}

func (s *Service) expire(e *entry) {
	defer func() {
		s.mu.Lock()
		e.expiring = false
		s.mu.Unlock()
	}()
	ctx := context.Background()
	s.mu.Lock()
	pause := e.rec.OnTimeout == "pause" && e.rec.State == Running
	id := e.rec.ID
	s.mu.Unlock()
	if pause {
		if err := s.pause(ctx, e); err == nil || errors.Is(err, errState) {
			s.mu.Lock()
			e.rec.EndAt = time.Now().Add(s.cfg.PausedTimeout)
			s.mu.Unlock()
			s.save()
			log.G(ctx).Infof("gvx serve: sandbox %s paused at its end time", id)
			return
		}
	}
	if err := s.kill(ctx, e); errors.Is(err, errGone) {
		return
	} else if err != nil {
		log.G(ctx).WithError(err).Warnf("gvx serve: sandbox %s at its end time", id)
		return
	}
	s.metrics.expired.Inc()
	log.G(ctx).Infof("gvx serve: sandbox %s reached its end time and was removed", id)
}

var (
	errGone  = errors.New("sandbox is gone")
	errState = errors.New("sandbox is not in that state")
)

func newToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// createSpec is what a create asks for.
type createSpec struct {
	Template  string
	Timeout   time.Duration
	Metadata  map[string]string
	EnvVars   map[string]string
	OnTimeout string
	Network   *networkRequest
	// Private: the sandbox's ports want a traffic token.
	Private bool
}

// create makes a sandbox for key.
func (s *Service) create(ctx context.Context, key string, spec createSpec) (*entry, error) {
	t, ok := s.cfg.Templates.Get(spec.Template)
	if !ok {
		return nil, httpErrorf(http.StatusNotFound, "template '%s' not found (templates here: %v; add one with POST /gvx/v1/templates or the templates file)", spec.Template, s.cfg.Templates.Names())
	}
	now := time.Now()
	e := &entry{tmpl: t, rec: record{
		ID: newID(), Key: key, Template: t.Name, Metadata: spec.Metadata, EnvVars: spec.EnvVars,
		Token: newToken(), StartedAt: now.UTC(), EndAt: now.Add(spec.Timeout).UTC(), State: Running, OnTimeout: spec.OnTimeout,
		Network: spec.Network,
	}}
	if spec.Private {
		e.rec.TrafficToken = newToken()
	}
	// The row is saved before the sandbox exists, so that a crash in
	// between leaves a row the next start removes.
	e.gone = true // not served until it runs
	s.mu.Lock()
	s.boxes[e.rec.ID] = e
	s.mu.Unlock()
	s.save()
	t0 := time.Now()
	sb, err := s.cfg.Backend.Create(ctx, e.rec.ID, t, e.rec.createOptions(t))
	s.metrics.Observe(metrics.OpCreate, t0, err)
	if err != nil {
		s.mu.Lock()
		delete(s.boxes, e.rec.ID)
		s.mu.Unlock()
		s.save()
		_ = s.cfg.Backend.Destroy(context.WithoutCancel(ctx), e.rec.ID)
		code := http.StatusInternalServerError
		if errdefs.IsResourceExhausted(err) {
			code = http.StatusServiceUnavailable // admission: the node is full
		}
		return nil, httpErrorf(code, "create sandbox from template %s: %v", t.Name, err)
	}
	log.G(ctx).Debugf("gvx serve: sandbox %s created in %s (backend %s)", e.rec.ID, time.Since(now), time.Since(t0))
	e.sb = sb
	e.envd = s.newEnvd(e, sb, e.rec)
	s.mu.Lock()
	e.rec.Backing = backingOf(sb, e.rec.ID)
	e.gone = false
	// The end time counts from when the sandbox runs.
	e.rec.EndAt = time.Now().Add(spec.Timeout).UTC()
	s.mu.Unlock()
	s.save()
	return e, nil
}

// lookup finds sandbox id for key: a foreign or unknown id is not found.
func (s *Service) lookup(key, id string) (*entry, record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.boxes[id]
	if !ok || e.gone || (key != "" && e.rec.Key != key) {
		return nil, record{}, httpErrorf(http.StatusNotFound, "sandbox %s not found", id)
	}
	return e, e.rec, nil
}

// entryAndBody is the handlers' first step: the key's sandbox of the
// path's {id}, and the request's JSON body decoded into v. Nil when
// either fails, the error answered.
func (s *Service) entryAndBody(w http.ResponseWriter, r *http.Request, key string, v any) *entry {
	e, _, err := s.lookup(key, r.PathValue("id"))
	if err == nil {
		err = s.readBody(w, r, v)
	}
	if err != nil {
		writeError(w, err)
		return nil
	}
	return e
}

// kill removes a sandbox.
func (s *Service) kill(ctx context.Context, e *entry) error {
	e.op.Lock()
	defer e.op.Unlock()
	s.mu.Lock()
	if e.gone {
		s.mu.Unlock()
		return errGone
	}
	e.gone = true
	s.mu.Unlock()
	e.envd.Close()
	t0 := time.Now()
	err := e.sb.Close(ctx)
	s.metrics.Observe(metrics.OpDestroy, t0, err)
	s.metrics.Lifetime(t0.Sub(e.rec.StartedAt))
	s.mu.Lock()
	delete(s.boxes, e.rec.ID)
	s.mu.Unlock()
	s.save()
	s.releaseOf(ctx, e.rec.ID)
	if err != nil {
		_ = s.cfg.Backend.Destroy(ctx, e.rec.backing())
		return fmt.Errorf("kill sandbox %s: %w", e.rec.ID, err)
	}
	return nil
}

// pause freezes a running sandbox (errState if it is paused).
func (s *Service) pause(ctx context.Context, e *entry) error {
	e.op.Lock()
	defer e.op.Unlock()
	s.mu.Lock()
	st, gone := e.rec.State, e.gone
	s.mu.Unlock()
	if gone {
		return errGone
	}
	if st == Paused {
		return errState
	}
	// File calls under way end first; those after, and commands' starts
	// (newEnvd's gate), find the sandbox paused.
	e.swap.Lock()
	defer e.swap.Unlock()
	if err := e.sb.Pause(ctx); err != nil {
		return fmt.Errorf("pause sandbox %s: %w", e.rec.ID, err)
	}
	s.mu.Lock()
	e.rec.State = Paused
	s.mu.Unlock()
	s.save()
	return nil
}

// newEnvd serves envd's protocol for e on its backend sandbox sb (rec is
// e's record): a command's start takes turns with a rollback, reset or
// pause of e (entry.swap), and is refused as one to a paused sandbox is
// once it finds e paused or gone.
func (s *Service) newEnvd(e *entry, sb backend.Sandbox, rec record) *envd.Server {
	srv := envd.New(s.measure(sb), defaults(e.tmpl, rec))
	srv.SetStartGate(func() (func(), error) {
		e.swap.RLock()
		s.mu.Lock()
		paused, gone := e.rec.State == Paused, e.gone || e.envd != srv
		s.mu.Unlock()
		switch {
		case gone: // killed, or reset (another envd serves it now)
			e.swap.RUnlock()
			return nil, errors.New("the sandbox is gone")
		case paused:
			e.swap.RUnlock()
			return nil, errors.New("the sandbox is paused: connect to it (Sandbox.connect) to resume it")
		}
		return e.swap.RUnlock, nil
	})
	return srv
}

// resume thaws a paused sandbox; false if it was running.
func (s *Service) resume(ctx context.Context, e *entry) (bool, error) {
	e.op.Lock()
	defer e.op.Unlock()
	s.mu.Lock()
	st, gone := e.rec.State, e.gone
	s.mu.Unlock()
	if gone {
		return false, errGone
	}
	if st == Running {
		return false, nil
	}
	if err := e.sb.Resume(ctx); err != nil {
		return false, fmt.Errorf("resume sandbox %s: %w", e.rec.ID, err)
	}
	s.mu.Lock()
	e.rec.State = Running
	s.mu.Unlock()
	s.save()
	return true, nil
}

// setEnd sets a sandbox's end time to now+d (extendOnly: never earlier).
func (s *Service) setEnd(e *entry, d time.Duration, extendOnly bool) {
	end := time.Now().Add(d).UTC()
	s.mu.Lock()
	if !extendOnly || end.After(e.rec.EndAt) {
		e.rec.EndAt = end
	}
	s.mu.Unlock()
	s.save()
}

// newID is an E2B-shaped sandbox id: i and 20 of [a-z0-9].
func newID() string { return randid.New("i", 20) }
