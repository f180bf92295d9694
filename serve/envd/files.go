package envd

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"

	"github.com/gvxrun/gvx/serve/connect"
)

// MaxUpload is the largest file POST /files takes (1 GiB).
const MaxUpload = 1 << 30

const scriptRead = `[ -e "$1" ] || exit 44; [ -d "$1" ] && exit 47; exec cat -- "$1"`

const scriptWrite = `[ -d "$1" ] && exit 47; mkdir -p -- "$(dirname -- "$1")" && exec cat >"$1"`

// writeJSONError sends envd's REST error body: an integer code.
func writeJSONError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": status, "message": msg})
}

// restError sends a Connect error of a script as envd's REST error.
func restError(w http.ResponseWriter, err error) {
	ce := connect.AsError(err)
	status := ce.Code.HTTPStatus()
	if ce.Code == connect.ResourceExhausted {
		status = http.StatusInsufficientStorage
	}
	writeJSONError(w, status, ce.Message)
}

// lazyBody writes the 200 header only with the first byte of the file,
// so that a failure before it can still be an error status.
type lazyBody struct {
	w       http.ResponseWriter
	started bool
}

func (b *lazyBody) Write(p []byte) (int, error) {
	if !b.started {
		b.started = true
		b.w.Header().Set("Content-Type", "application/octet-stream")
		b.w.WriteHeader(http.StatusOK)
	}
	return b.w.Write(p)
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("path") == "" {
		writeJSONError(w, http.StatusBadRequest, "GET /files needs ?path=: the file to read")
		return
	}
	user := s.user(r)
	p := resolve(user, q.Get("path"))
	body := &lazyBody{w: w}
	code, stderr, err := s.run(r.Context(), user, scriptRead, nil, body, p)
	if body.started {
		return // the status is out; a late failure can only cut the body short
	}
	if err == nil && code != 0 {
		err = scriptError(code, p, stderr)
	}
	if err != nil {
		restError(w, err)
		return
	}
	body.Write(nil)
}

type writeInfo struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

func (s *Server) postFile(w http.ResponseWriter, r *http.Request) {
	user := s.user(r)
	qpath := r.URL.Query().Get("path")
	r.Body = http.MaxBytesReader(w, r.Body, MaxUpload)
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var out []writeInfo
	write := func(dest string, body io.Reader) bool {
		if dest == "" {
			writeJSONError(w, http.StatusBadRequest, "POST /files: no destination path (set ?path= or the part's filename)")
			return false
		}
		p := resolve(user, dest)
		code, stderr, err := s.run(r.Context(), user, scriptWrite, body, io.Discard, p)
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) || strings.Contains(stderr, "request body too large") {
			writeJSONError(w, http.StatusRequestEntityTooLarge, "upload over 1 GiB")
			return false
		}
		if err == nil && code != 0 {
			err = scriptError(code, p, stderr)
		}
		if err != nil {
			restError(w, err)
			return false
		}
		out = append(out, writeInfo{Name: path.Base(p), Type: "file", Path: p})
		return true
	}
	switch ct {
	case "multipart/form-data":
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				writeJSONError(w, http.StatusBadRequest, "malformed multipart body: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				continue
			}
			// The filename is the destination (Part.FileName would keep
			// only its last element).
			_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			dest := dp["filename"]
			if qpath != "" && !strings.Contains(dest, "/") {
				dest = qpath
			}
			if !write(dest, part) {
				return
			}
		}
	case "application/octet-stream", "":
		var body io.Reader = r.Body
		switch enc := r.Header.Get("Content-Encoding"); enc {
		case "", "identity":
		case "gzip":
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				writeJSONError(w, http.StatusBadRequest, "Content-Encoding gzip, but the body is not gzip: "+err.Error())
				return
			}
			body = zr
		default:
			writeJSONError(w, http.StatusUnsupportedMediaType, "Content-Encoding "+enc+" is not supported: upload uncompressed or gzip")
			return
		}
		if !write(qpath, body) {
			return
		}
	default:
		writeJSONError(w, http.StatusUnsupportedMediaType, "POST /files takes multipart/form-data or application/octet-stream, not "+ct)
		return
	}
	if len(out) == 0 {
		writeJSONError(w, http.StatusBadRequest, "POST /files: the multipart body has no part named file")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
