package envd

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/gvxrun/gvx/serve/backend"
	"github.com/gvxrun/gvx/serve/connect"
)

// Each filesystem call is one bash script run in the sandbox as the
// caller's user, so permissions are the sandbox's own. Scripts exit with
// these codes for the errors the protocol names.
const (
	exitNotFound = 44
	exitNotDir   = 45
	exitExists   = 46
	exitIsDir    = 47
)

// printEntries prints find's view of files as NUL-separated fields: type,
// size, mode, owner, group, mtime, path, symlink target.
const printEntries = `-printf '%y\0%s\0%m\0%u\0%g\0%T@\0%p\0%l\0'`

const scriptStat = `p=$1; [ -e "$p" ] || [ -L "$p" ] || exit 44; exec find "$p" -maxdepth 0 ` + printEntries

const scriptList = `p=$1; [ -e "$p" ] || exit 44; [ -d "$p" ] || exit 45; exec find "$p" -mindepth 1 -maxdepth "$2" ` + printEntries

const scriptMkdir = `p=$1; [ -e "$p" ] && exit 46; mkdir -p -- "$p" && exec find "$p" -maxdepth 0 ` + printEntries

const scriptMove = `[ -e "$1" ] || [ -L "$1" ] || exit 44; mkdir -p -- "$(dirname -- "$2")" && mv -fT -- "$1" "$2" && exec find "$2" -maxdepth 0 ` + printEntries

const scriptRemove = `[ -e "$1" ] || [ -L "$1" ] || exit 44; exec rm -rf -- "$1"`

// run runs a bash script in the sandbox as user and returns its output.
func (s *Server) run(ctx context.Context, user, script string, stdin io.Reader, stdout io.Writer, args ...string) (code int, stderr string, err error) {
	var errb bytes.Buffer
	c := backend.Cmd{
		Args:   append([]string{"/bin/bash", "-c", script, "envd"}, args...),
		Env:    s.env(user, nil),
		Dir:    "/",
		User:   user,
		Stdin:  stdin,
		Stdout: stdout,
		Stderr: &errb,
	}
	p, err := s.sb.Exec(ctx, c)
	if err != nil {
		return -1, "", connect.Errorf(connect.Unavailable, "run in the sandbox: %v", err)
	}
	code, err = p.Wait(ctx)
	if err != nil {
		return -1, "", connect.Errorf(connect.Unavailable, "run in the sandbox: %v", err)
	}
	return code, strings.TrimSpace(errb.String()), nil
}

// entries runs a script printing entries and parses them.
func (s *Server) entries(ctx context.Context, user, what, script string, args ...string) ([]EntryInfo, error) {
	var out bytes.Buffer
	code, stderr, err := s.run(ctx, user, script, nil, &out, args...)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, scriptError(code, what, stderr)
	}
	return parseEntries(out.Bytes()), nil
}

// scriptError is the Connect error for a script's exit code.
func scriptError(code int, what, stderr string) error {
	switch code {
	case exitNotFound:
		return connect.Errorf(connect.NotFound, "%s: no such file or directory", what)
	case exitNotDir:
		return connect.Errorf(connect.InvalidArgument, "%s is not a directory", what)
	case exitExists:
		return connect.Errorf(connect.AlreadyExists, "%s already exists", what)
	case exitIsDir:
		return connect.Errorf(connect.InvalidArgument, "%s is a directory", what)
	}
	if strings.Contains(stderr, "Permission denied") {
		return connect.Errorf(connect.PermissionDenied, "%s: %s", what, stderr)
	}
	if strings.Contains(stderr, "No space left") {
		return connect.Errorf(connect.ResourceExhausted, "%s: %s", what, stderr)
	}
	return connect.Errorf(connect.Internal, "%s: exit status %d: %s", what, code, stderr)
}

func parseEntries(b []byte) []EntryInfo {
	f := strings.Split(string(b), "\x00")
	out := []EntryInfo{}
	for i := 0; i+8 <= len(f); i += 8 {
		out = append(out, entry(f[i:i+8]))
	}
	return out
}

// entry makes an EntryInfo of find's fields.
func entry(f []string) EntryInfo {
	size, _ := strconv.ParseInt(f[1], 10, 64)
	perm, _ := strconv.ParseUint(f[2], 8, 32)
	mode := fs.FileMode(perm & 0o777)
	if perm&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if perm&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if perm&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	e := EntryInfo{Name: path.Base(f[6]), Path: f[6], Size: size, Owner: f[3], Group: f[4]}
	switch f[0] {
	case "f":
		e.Type = FileTypeFile
	case "d":
		e.Type = FileTypeDirectory
		mode |= fs.ModeDir
	case "l":
		e.Type = FileTypeSymlink
		mode |= fs.ModeSymlink
		t := f[7]
		e.SymlinkTarget = &t
	default: // devices, sockets, pipes: the protocol has no type for them
		e.Type = FileTypeUnspecified
	}
	e.Mode = uint32(mode)
	e.Permissions = mode.String()
	if sec, frac, ok := strings.Cut(f[5], "."); ok || sec != "" {
		s, _ := strconv.ParseInt(sec, 10, 64)
		ns, _ := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
		e.ModifiedTime = time.Unix(s, ns).UTC().Format(time.RFC3339Nano)
	}
	return e
}

func (s *Server) one(ctx context.Context, user, what, script string, args ...string) (*EntryResponse, error) {
	es, err := s.entries(ctx, user, what, script, args...)
	if err != nil {
		return nil, err
	}
	if len(es) == 0 {
		return nil, connect.Errorf(connect.NotFound, "%s: no such file or directory", what)
	}
	return &EntryResponse{Entry: &es[0]}, nil
}

func (s *Server) stat(ctx context.Context, r *http.Request, req *PathRequest) (*EntryResponse, error) {
	user := s.user(r)
	p := resolve(user, req.Path)
	return s.one(ctx, user, p, scriptStat, p)
}

func (s *Server) listDir(ctx context.Context, r *http.Request, req *ListDirRequest) (*ListDirResponse, error) {
	user := s.user(r)
	p := resolve(user, req.Path)
	depth := req.Depth
	if depth == 0 {
		depth = 1
	}
	es, err := s.entries(ctx, user, p, scriptList, p, strconv.FormatUint(uint64(depth), 10))
	if err != nil {
		return nil, err
	}
	return &ListDirResponse{Entries: es}, nil
}

func (s *Server) makeDir(ctx context.Context, r *http.Request, req *PathRequest) (*EntryResponse, error) {
	user := s.user(r)
	p := resolve(user, req.Path)
	return s.one(ctx, user, p, scriptMkdir, p)
}

func (s *Server) move(ctx context.Context, r *http.Request, req *MoveRequest) (*EntryResponse, error) {
	user := s.user(r)
	src, dst := resolve(user, req.Source), resolve(user, req.Destination)
	return s.one(ctx, user, src, scriptMove, src, dst)
}

func (s *Server) remove(ctx context.Context, r *http.Request, req *PathRequest) (*Empty, error) {
	user := s.user(r)
	p := resolve(user, req.Path)
	code, stderr, err := s.run(ctx, user, scriptRemove, nil, io.Discard, p)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, scriptError(code, p, stderr)
	}
	return &Empty{}, nil
}
