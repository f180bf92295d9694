// Package envd answers E2B's in-sandbox protocol on the host.
//
// envd is the daemon E2B runs inside each sandbox: a Connect service for
// processes (package process) and files (package filesystem), plus
// /health and /files. gvx answers the same protocol host-side: each
// process is one exec through the sandbox's backend, each filesystem call
// one short shell command in the sandbox (bash, coreutils and findutils,
// which E2B templates have), and file transfers stream through cat. The
// sandbox holds no agent and needs no network.
package envd

import (
	"context"
	"encoding/base64"
	"net/http"
	"path"
	"strings"
	"sync"

	"github.com/gvxrun/gvx/serve/backend"
	"github.com/gvxrun/gvx/serve/connect"
)

// Version is the envd protocol version gvx reports: the SDKs switch
// features on by it (0.6.4 unlocks all of e2b 2.51's).
const Version = "0.6.13"

// Defaults are a sandbox's default user, directory and environment.
type Defaults struct {
	User    string // default "user"
	Workdir string // default the user's home
	Env     []string
}

// Server is one sandbox's envd.
type Server struct {
	sb       backend.Sandbox
	defaults Defaults
	mux      *http.ServeMux

	ctx    context.Context // ends when the sandbox goes
	cancel context.CancelFunc

	mu       sync.Mutex
	nextPID  uint32
	procs    map[uint32]*proc
	watchers map[string]*watcher
	watching int // watchers and WatchDir streams (MaxWatchers)
	closed   bool
	wg       sync.WaitGroup

	// startGate, if set, is taken around a command's start (SetStartGate).
	startGate func() (release func(), err error)
}

// SetStartGate makes each command's start wait for gate, which returns
// the release to call once the command has started, or an error (the
// sandbox cannot run commands now: Unavailable). Call it before serving.
func (s *Server) SetStartGate(gate func() (release func(), err error)) { s.startGate = gate }

// New serves sandbox sb's envd.
func New(sb backend.Sandbox, d Defaults) *Server {
	if d.User == "" {
		d.User = "user"
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{sb: sb, defaults: d, ctx: ctx, cancel: cancel, nextPID: 1000,
		procs: map[uint32]*proc{}, watchers: map[string]*watcher{}}
	m := http.NewServeMux()
	m.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	m.HandleFunc("GET /files", s.getFile)
	m.HandleFunc("POST /files", s.postFile)
	m.Handle("POST /process.Process/Start", connect.ServerStream(s.start))
	m.Handle("POST /process.Process/Connect", connect.ServerStream(s.connect))
	m.Handle("POST /process.Process/List", connect.Unary(s.list))
	m.Handle("POST /process.Process/SendInput", connect.Unary(s.sendInput))
	m.Handle("POST /process.Process/SendSignal", connect.Unary(s.sendSignal))
	m.Handle("POST /process.Process/CloseStdin", connect.Unary(s.closeStdin))
	m.Handle("POST /process.Process/Update", connect.Unary(s.update))
	m.Handle("POST /process.Process/StreamInput", connect.Unary(func(context.Context, *http.Request, *Empty) (*Empty, error) {
		return nil, connect.Errorf(connect.Unimplemented, "StreamInput (client streaming) is not served; use SendInput")
	}))
	m.Handle("POST /filesystem.Filesystem/Stat", connect.Unary(s.stat))
	m.Handle("POST /filesystem.Filesystem/ListDir", connect.Unary(s.listDir))
	m.Handle("POST /filesystem.Filesystem/MakeDir", connect.Unary(s.makeDir))
	m.Handle("POST /filesystem.Filesystem/Move", connect.Unary(s.move))
	m.Handle("POST /filesystem.Filesystem/Remove", connect.Unary(s.remove))
	m.Handle("POST /filesystem.Filesystem/WatchDir", connect.ServerStream(s.watchDir))
	m.Handle("POST /filesystem.Filesystem/CreateWatcher", connect.Unary(s.createWatcher))
	m.Handle("POST /filesystem.Filesystem/GetWatcherEvents", connect.Unary(s.getWatcherEvents))
	m.Handle("POST /filesystem.Filesystem/RemoveWatcher", connect.Unary(s.removeWatcher))
	for _, p := range []string{"/init", "/freeze", "/unfreeze", "/fsfreeze", "/fsthaw", "/collapse"} {
		m.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			writeJSONError(w, http.StatusForbidden, r.URL.Path+" is internal to envd and not served from outside the sandbox")
		})
	}
	s.mux = m
	return s
}

// ServeHTTP serves one envd request of the sandbox.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close kills the sandbox's running processes and ends its streams.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// Running is how many processes run.
func (s *Server) Running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.procs)
}

// user is the request's user: Basic auth's user name, else the default.
func (s *Server) user(r *http.Request) string {
	if u := r.URL.Query().Get("username"); u != "" {
		return u
	}
	if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Basic ") {
		if b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(a, "Basic ")); err == nil {
			if name, _, _ := strings.Cut(string(b), ":"); name != "" {
				return name
			}
		}
	}
	return s.defaults.User
}

// home is a user's home directory (E2B's convention: /root for root,
// /home/<name> for the others).
func home(user string) string {
	if user == "root" || user == "0" {
		return "/root"
	}
	return "/home/" + user
}

// workdir is a user's default directory.
func (s *Server) workdir(user string) string {
	if user == s.defaults.User && s.defaults.Workdir != "" {
		return s.defaults.Workdir
	}
	return home(user)
}

// resolve makes p absolute for user: ~ is the home, relative paths are
// relative to it.
func resolve(user, p string) string {
	h := home(user)
	switch {
	case p == "~":
		return h
	case strings.HasPrefix(p, "~/"):
		return path.Join(h, p[2:])
	case !path.IsAbs(p):
		return path.Join(h, p)
	}
	return path.Clean(p)
}

// env is the environment of user's commands with extra added.
func (s *Server) env(user string, extra map[string]string) []string {
	env := []string{"HOME=" + home(user), "USER=" + user, "LOGNAME=" + user}
	env = append(env, s.defaults.Env...)
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}
