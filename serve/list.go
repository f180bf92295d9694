package serve

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// listQuery is GET /v2/sandboxes's query.
type listQuery struct {
	metadata  map[string]string
	states    map[State]bool
	template  string
	after     time.Time
	limit     int
	next      *record // the page starts after this one (StartedAt, ID)
	ascending bool
}

func parseList(q url.Values, v2 bool) (listQuery, error) {
	lq := listQuery{limit: 100, states: map[State]bool{Running: true, Paused: true}}
	if !v2 {
		lq.states = map[State]bool{Running: true}
	}
	if m := q.Get("metadata"); m != "" {
		kv, err := url.ParseQuery(m)
		if err != nil {
			return lq, httpErrorf(http.StatusBadRequest, "metadata filter %q: give it URL-encoded, k1=v1&k2=v2", m)
		}
		lq.metadata = map[string]string{}
		for k, v := range kv {
			lq.metadata[k] = v[0]
		}
	}
	if st := q["state"]; len(st) > 0 {
		lq.states = map[State]bool{}
		for _, v := range st {
			for _, p := range strings.Split(v, ",") {
				switch State(p) {
				case Running, Paused:
					lq.states[State(p)] = true
				default:
					return lq, httpErrorf(http.StatusBadRequest, "state %q: give running, paused or both (state=running,paused)", p)
				}
			}
		}
	}
	lq.template = q.Get("template")
	if v := q.Get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return lq, httpErrorf(http.StatusBadRequest, "startedAfter %q is not an RFC 3339 time", v)
		}
		lq.after = t
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return lq, httpErrorf(http.StatusBadRequest, "limit %q: give 1 to 1000", v)
		}
		lq.limit = n
	}
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		lq.ascending = true
	default:
		return lq, httpErrorf(http.StatusBadRequest, "order %q: give asc or desc", q.Get("order"))
	}
	if v := q.Get("nextToken"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		ns, id, ok := strings.Cut(string(b), "/")
		n, err2 := strconv.ParseInt(ns, 10, 64)
		if err != nil || !ok || err2 != nil {
			return lq, httpErrorf(http.StatusBadRequest, "nextToken %q is not one this service gave out", v)
		}
		lq.next = &record{ID: id, StartedAt: time.Unix(0, n).UTC()}
	}
	return lq, nil
}

func (lq listQuery) match(rec record) bool {
	if !lq.states[rec.State] || (lq.template != "" && lq.template != rec.Template) || rec.StartedAt.Before(lq.after) {
		return false
	}
	for k, v := range lq.metadata {
		if rec.Metadata[k] != v {
			return false
		}
	}
	return true
}

// listHandler is GET /v2/sandboxes (and GET /sandboxes, running only):
// the key's sandboxes by start time, newest first unless order=asc, in
// pages of limit with X-Next-Token naming the next page.
func (s *Service) listHandler(v2 bool) func(http.ResponseWriter, *http.Request, string) {
	return func(w http.ResponseWriter, r *http.Request, key string) {
		lq, err := parseList(r.URL.Query(), v2)
		if err != nil {
			writeError(w, err)
			return
		}
		type item struct {
			e   *entry
			rec record
		}
		var items []item
		running := 0
		s.mu.Lock()
		for _, e := range s.boxes {
			if e.gone || e.rec.Key != key {
				continue
			}
			if e.rec.State == Running {
				running++
			}
			if lq.match(e.rec) {
				items = append(items, item{e, e.rec})
			}
		}
		s.mu.Unlock()
		before := func(a, b record) bool {
			if !a.StartedAt.Equal(b.StartedAt) {
				return a.StartedAt.Before(b.StartedAt) == lq.ascending
			}
			return (a.ID < b.ID) == lq.ascending
		}
		sort.Slice(items, func(i, j int) bool { return before(items[i].rec, items[j].rec) })
		out := []detailJSON{}
		var last record
		for _, it := range items {
			if lq.next != nil && !before(*lq.next, it.rec) {
				continue
			}
			if len(out) == lq.limit {
				tok := strconv.FormatInt(last.StartedAt.UnixNano(), 10) + "/" + last.ID
				w.Header().Set("X-Next-Token", base64.RawURLEncoding.EncodeToString([]byte(tok)))
				break
			}
			out = append(out, s.detail(it.e, it.rec, false))
			last = it.rec
		}
		w.Header().Set("X-Total-Running", strconv.Itoa(running))
		writeJSON(w, http.StatusOK, out)
	}
}
