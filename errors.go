package gvx

import (
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
)

// Kinds of errors. The SDK's errors are *Error values whose Kind is one
// of these (test with errors.Is); a call cut short by its context wraps
// the context's error instead (Kind nil).
var (
	// ErrInvalid: the Config, an option or an argument is wrong; the
	// message names it and the fix.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound: no such sandbox, image, file or process.
	ErrNotFound = errors.New("not found")
	// ErrExists: a sandbox with that id exists already.
	ErrExists = errors.New("already exists")
	// ErrNotRunning: the sandbox (or process) is not running: it exited,
	// was killed, or is paused where that matters.
	ErrNotRunning = errors.New("not running")
	// ErrTimeout: a deadline set through the SDK (Config.Timeout,
	// ExecOptions.Timeout) passed; what it bounded was killed.
	ErrTimeout = errors.New("timed out")
	// ErrOOM: the sandbox reached its memory limit and the host's OOM
	// killer ended it (exit status 137; docs/operations.md#quotas).
	ErrOOM = errors.New("out of memory")
	// ErrClosed: the sandbox, pool or client was closed.
	ErrClosed = errors.New("closed")
	// ErrUnsupported: gvx cannot do this (yet), or the image lacks a tool
	// the call needs; the message says which.
	ErrUnsupported = errors.New("not supported")
	// ErrUnavailable: containerd or gvx's binaries cannot be reached or
	// started.
	ErrUnavailable = errors.New("unavailable")
)

// Error is an error of an SDK call: what was done (Op), to which sandbox
// (ID, may be empty), its kind and the cause.
type Error struct {
	Op   string
	ID   string
	Kind error
	Err  error
}

func (e *Error) Error() string {
	s := "gvx: " + e.Op
	if e.ID != "" {
		s += " " + e.ID
	}
	switch {
	case e.Err != nil:
		return s + ": " + e.Err.Error()
	case e.Kind != nil:
		return s + ": " + e.Kind.Error()
	}
	return s + " failed"
}

// Unwrap gives errors.Is and errors.As both the kind and the cause.
func (e *Error) Unwrap() []error {
	var out []error
	if e.Kind != nil {
		out = append(out, e.Kind)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// newError makes an *Error, taking the kind from containerd's error
// classes when none is given.
func newError(op, id string, kind, err error) error {
	if kind == nil {
		kind = kindOf(err)
	}
	return &Error{Op: op, ID: id, Kind: kind, Err: err}
}

// errorf is newError with a formatted cause.
func errorf(op, id string, kind error, format string, a ...any) error {
	return newError(op, id, kind, fmt.Errorf(format, a...))
}

// kindOf maps containerd's (errdefs) and the context's errors to a kind.
func kindOf(err error) error {
	var e *Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &e):
		return e.Kind
	case errdefs.IsNotFound(err):
		return ErrNotFound
	case errdefs.IsAlreadyExists(err):
		return ErrExists
	case errdefs.IsInvalidArgument(err):
		return ErrInvalid
	case errdefs.IsNotImplemented(err):
		return ErrUnsupported
	case errdefs.IsUnavailable(err):
		return ErrUnavailable
	case errdefs.IsFailedPrecondition(err):
		return ErrNotRunning
	}
	return nil
}
