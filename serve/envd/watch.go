package envd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gvxrun/gvx/serve/connect"
)

// Watches poll: the directory is listed every PollInterval and compared
// with the last listing (no inotify through an exec). Changes between two
// polls that undo each other are not seen.
const PollInterval = 300 * time.Millisecond

// MaxWatchers bounds a sandbox's watchers (polled ones of CreateWatcher
// and WatchDir streams together): each lists its directory with an exec
// in the sandbox every PollInterval, so a client holding watchers without
// bound would flood the host with execs.
const MaxWatchers = 16

// addWatch counts one more watcher of the sandbox, or refuses it.
func (s *Server) addWatch(dir string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watching >= MaxWatchers {
		return connect.Errorf(connect.ResourceExhausted, "watch %s: the sandbox has %d watchers, the most envd keeps (%d); remove one (RemoveWatcher or end a WatchDir stream) first",
			dir, s.watching, MaxWatchers)
	}
	s.watching++
	return nil
}

func (s *Server) doneWatch() {
	s.mu.Lock()
	s.watching--
	s.mu.Unlock()
}

// watcher is a polled watcher of CreateWatcher.
type watcher struct {
	cancel context.CancelFunc
	events chan FilesystemEvent
	err    chan error
}

// snapshot lists dir (recursively to depth 64 if recursive).
func (s *Server) snapshot(ctx context.Context, user, dir string, recursive bool) (map[string]EntryInfo, error) {
	depth := "1"
	if recursive {
		depth = "64"
	}
	es, err := s.entries(ctx, user, dir, scriptList, dir, depth)
	if err != nil {
		return nil, err
	}
	m := make(map[string]EntryInfo, len(es))
	for _, e := range es {
		m[e.Path] = e
	}
	return m, nil
}

// diff is what changed from old to cur, in path order.
func diff(dir string, old, cur map[string]EntryInfo, withEntry bool) []FilesystemEvent {
	var out []FilesystemEvent
	name := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, dir), "/") }
	ev := func(t EventType, e EntryInfo) {
		fe := FilesystemEvent{Name: name(e.Path), Type: t}
		if withEntry && t != EventRemove {
			c := e
			fe.Entry = &c
		}
		out = append(out, fe)
	}
	for p, e := range cur {
		o, ok := old[p]
		switch {
		case !ok:
			ev(EventCreate, e)
		case o.Size != e.Size || o.ModifiedTime != e.ModifiedTime:
			ev(EventWrite, e)
		case o.Mode != e.Mode:
			ev(EventChmod, e)
		}
	}
	for p, e := range old {
		if _, ok := cur[p]; !ok {
			ev(EventRemove, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// watch polls dir until ctx ends, handing each change to emit.
func (s *Server) watch(ctx context.Context, user, dir string, recursive, withEntry bool, started func(), emit func(FilesystemEvent) error) error {
	old, err := s.snapshot(ctx, user, dir, recursive)
	if err != nil {
		return err
	}
	started()
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, err := s.snapshot(ctx, user, dir, recursive)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range diff(dir, old, cur, withEntry) {
			if err := emit(e); err != nil {
				return err
			}
		}
		old = cur
	}
}

func (s *Server) watchDir(ctx context.Context, r *http.Request, req *WatchDirRequest, st *connect.Stream[WatchDirResponse]) error {
	user := s.user(r)
	dir := resolve(user, req.Path)
	every := 90 * time.Second
	if v, err := strconv.Atoi(r.Header.Get("Keepalive-Ping-Interval")); err == nil && v > 0 {
		every = time.Duration(v) * time.Second
	}
	if err := s.addWatch(dir); err != nil {
		return err
	}
	defer s.doneWatch()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // keepalives
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if st.Send(&WatchDirResponse{Keepalive: &struct{}{}}) != nil {
					cancel()
				}
			}
		}
	}()
	go func() { // the sandbox going ends the watch
		select {
		case <-s.ctx.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	var sendErr error
	err := s.watch(ctx, user, dir, req.Recursive, req.IncludeEntry,
		func() { sendErr = st.Send(&WatchDirResponse{Start: &struct{}{}}) },
		func(e FilesystemEvent) error {
			if sendErr != nil {
				return sendErr
			}
			return st.Send(&WatchDirResponse{Filesystem: &e})
		})
	if err == nil {
		err = sendErr
	}
	return err
}

func (s *Server) createWatcher(_ context.Context, r *http.Request, req *WatchDirRequest) (*CreateWatcherResponse, error) {
	user := s.user(r)
	dir := resolve(user, req.Path)
	if err := s.addWatch(dir); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(s.ctx)
	w := &watcher{cancel: cancel, events: make(chan FilesystemEvent, 4096), err: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		err := s.watch(ctx, user, dir, req.Recursive, req.IncludeEntry, func() { close(ready) }, func(e FilesystemEvent) error {
			select {
			case w.events <- e:
			default: // a client that never polls loses the oldest news
			}
			return nil
		})
		w.err <- err
	}()
	select {
	case <-ready:
	case err := <-w.err:
		cancel()
		s.doneWatch()
		if err == nil {
			err = connect.Errorf(connect.Unavailable, "the sandbox is going away")
		}
		return nil, err
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	s.mu.Lock()
	s.watchers[id] = w
	s.mu.Unlock()
	return &CreateWatcherResponse{WatcherID: id}, nil
}

func (s *Server) getWatcher(id string) (*watcher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.watchers[id]
	if !ok {
		return nil, connect.Errorf(connect.NotFound, "watcher %q not found", id)
	}
	return w, nil
}

func (s *Server) getWatcherEvents(_ context.Context, _ *http.Request, req *WatcherRequest) (*GetWatcherEventsResponse, error) {
	w, err := s.getWatcher(req.WatcherID)
	if err != nil {
		return nil, err
	}
	out := &GetWatcherEventsResponse{Events: []FilesystemEvent{}}
	for {
		select {
		case e := <-w.events:
			out.Events = append(out.Events, e)
		case err := <-w.err:
			if err != nil {
				return nil, err
			}
			return out, nil
		default:
			return out, nil
		}
	}
}

func (s *Server) removeWatcher(_ context.Context, _ *http.Request, req *WatcherRequest) (*Empty, error) {
	w, err := s.getWatcher(req.WatcherID)
	if err != nil {
		return nil, err
	}
	w.cancel()
	s.mu.Lock()
	if _, ok := s.watchers[req.WatcherID]; ok {
		delete(s.watchers, req.WatcherID)
		s.watching--
	}
	s.mu.Unlock()
	return &Empty{}, nil
}
