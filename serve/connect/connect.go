// Package connect serves the Connect protocol with the JSON codec.
//
// It is the part of connectrpc.com's protocol the e2b SDKs speak to envd:
// unary calls (`application/json` bodies, errors as `{"code","message"}`
// with the HTTP status of the code) and server streams
// (`application/connect+json`: a one-envelope request, then envelopes
// `[flags u8][length u32 BE][JSON]`, each flushed, ending with an
// end-stream envelope, flags 0x02). Messages are plain Go structs whose JSON
// encoding follows proto3's JSON mapping (camelCase names, int64 as
// strings, enums as names, bytes as base64, zero values omitted).
package connect

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Code is a Connect error code.
type Code string

// The Connect error codes (connectrpc.com/docs/protocol#error-codes).
const (
	Canceled           Code = "canceled"
	Unknown            Code = "unknown"
	InvalidArgument    Code = "invalid_argument"
	DeadlineExceeded   Code = "deadline_exceeded"
	NotFound           Code = "not_found"
	AlreadyExists      Code = "already_exists"
	PermissionDenied   Code = "permission_denied"
	ResourceExhausted  Code = "resource_exhausted"
	FailedPrecondition Code = "failed_precondition"
	Aborted            Code = "aborted"
	OutOfRange         Code = "out_of_range"
	Unimplemented      Code = "unimplemented"
	Internal           Code = "internal"
	Unavailable        Code = "unavailable"
	DataLoss           Code = "data_loss"
	Unauthenticated    Code = "unauthenticated"
)

// HTTPStatus is the status a unary error with this code is sent with.
func (c Code) HTTPStatus() int {
	switch c {
	case Canceled:
		return 499
	case InvalidArgument, FailedPrecondition, OutOfRange:
		return http.StatusBadRequest
	case DeadlineExceeded:
		return http.StatusGatewayTimeout
	case NotFound:
		return http.StatusNotFound
	case AlreadyExists, Aborted:
		return http.StatusConflict
	case PermissionDenied:
		return http.StatusForbidden
	case ResourceExhausted:
		return http.StatusTooManyRequests
	case Unimplemented:
		return http.StatusNotImplemented
	case Unavailable:
		return http.StatusServiceUnavailable
	case Unauthenticated:
		return http.StatusUnauthorized
	default:
		return http.StatusInternalServerError
	}
}

// Error is a Connect error: a code and a message for the client.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message,omitempty"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf makes an *Error.
func Errorf(code Code, format string, a ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, a...)}
}

// AsError turns any error into a Connect error: an *Error in err's chain
// as is, context errors as canceled or deadline_exceeded, anything else as
// internal with err's text.
func AsError(err error) *Error {
	var ce *Error
	if errors.As(err, &ce) {
		return ce
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: DeadlineExceeded, Message: err.Error()}
	case errors.Is(err, context.Canceled):
		return &Error{Code: Canceled, Message: err.Error()}
	}
	return &Error{Code: Internal, Message: err.Error()}
}

// MaxMessage is the largest request message accepted (4 MiB).
const MaxMessage = 4 << 20

const (
	flagCompressed = 0x01
	flagEndStream  = 0x02
)

// Timeout is the request's Connect-Timeout-Ms; ok is false without one.
func Timeout(r *http.Request) (d time.Duration, ok bool, err error) {
	v := r.Header.Get("Connect-Timeout-Ms")
	if v == "" {
		return 0, false, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 {
		return 0, false, Errorf(InvalidArgument, "Connect-Timeout-Ms %q is not a non-negative integer", v)
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}

// WriteUnaryError sends err as a unary Connect error.
func WriteUnaryError(w http.ResponseWriter, err error) {
	ce := AsError(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ce.Code.HTTPStatus())
	_ = json.NewEncoder(w).Encode(ce)
}

// Unary adapts fn to a unary Connect JSON handler.
func Unary[Req, Resp any](fn func(ctx context.Context, r *http.Request, req *Req) (*Resp, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			WriteUnaryError(w, Errorf(Unimplemented, "%s %s: Connect unary calls are POST", r.Method, r.URL.Path))
			return
		}
		ct := mediaType(r.Header.Get("Content-Type"))
		if ct != "application/json" {
			w.WriteHeader(http.StatusUnsupportedMediaType)
			_, _ = fmt.Fprintf(w, "content type %q: gvx speaks Connect with the JSON codec only (application/json)\n", ct)
			return
		}
		if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
			WriteUnaryError(w, Errorf(Unimplemented, "content encoding %q is not supported; send identity", enc))
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxMessage+1))
		if err != nil {
			WriteUnaryError(w, Errorf(InvalidArgument, "read request: %v", err))
			return
		}
		if len(body) > MaxMessage {
			WriteUnaryError(w, Errorf(ResourceExhausted, "request message over %d bytes", MaxMessage))
			return
		}
		req := new(Req)
		if err := decode(body, req); err != nil {
			WriteUnaryError(w, err)
			return
		}
		resp, err := fn(r.Context(), r, req)
		if err != nil {
			WriteUnaryError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	}
}

func decode(body []byte, v any) error {
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return Errorf(InvalidArgument, "malformed JSON request message: %v", err)
	}
	return nil
}

func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.ToLower(strings.TrimSpace(ct))
}

// Stream sends a server stream's messages, each flushed as it is sent.
// It is safe for concurrent use.
type Stream[Resp any] struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
}

// Send writes one message envelope and flushes it.
func (s *Stream[Resp]) Send(m *Resp) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode stream message: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeLocked(0, b)
}

func (s *Stream[Resp]) writeLocked(flags byte, b []byte) error {
	var hdr [5]byte
	hdr[0] = flags
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(b)))
	if _, err := s.w.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}

type endStream struct {
	Error *Error `json:"error,omitempty"`
}

func (s *Stream[Resp]) end(err error) {
	var es endStream
	if err != nil {
		es.Error = AsError(err)
	}
	b, _ := json.Marshal(es)
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.writeLocked(flagEndStream, b)
}

// ServerStream adapts fn to a server-streaming Connect JSON handler. fn
// sends its messages on the stream; its error, if any, goes into the
// end-stream envelope.
func ServerStream[Req, Resp any](fn func(ctx context.Context, r *http.Request, req *Req, s *Stream[Resp]) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		ct := mediaType(r.Header.Get("Content-Type"))
		if ct != "application/connect+json" {
			w.WriteHeader(http.StatusUnsupportedMediaType)
			_, _ = fmt.Fprintf(w, "content type %q: gvx speaks Connect streams with the JSON codec only (application/connect+json)\n", ct)
			return
		}
		w.Header().Set("Content-Type", "application/connect+json")
		s := &Stream[Resp]{w: w, rc: http.NewResponseController(w)}
		req := new(Req)
		if err := readEnvelope(r, req); err != nil {
			w.WriteHeader(http.StatusOK)
			s.end(err)
			return
		}
		w.WriteHeader(http.StatusOK)
		s.end(fn(r.Context(), r, req, s))
	}
}

// readEnvelope reads the single request envelope of a server stream.
func readEnvelope(r *http.Request, v any) error {
	if enc := r.Header.Get("Connect-Content-Encoding"); enc != "" && enc != "identity" {
		return Errorf(Unimplemented, "connect content encoding %q is not supported; send identity", enc)
	}
	var hdr [5]byte
	if _, err := io.ReadFull(r.Body, hdr[:]); err != nil {
		return Errorf(InvalidArgument, "read request envelope: %v", err)
	}
	if hdr[0]&flagCompressed != 0 {
		return Errorf(Unimplemented, "compressed request envelope: send it uncompressed")
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxMessage {
		return Errorf(ResourceExhausted, "request message of %d bytes is over %d", n, MaxMessage)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.Body, b); err != nil {
		return Errorf(InvalidArgument, "read request message: %v", err)
	}
	return decode(b, v)
}
