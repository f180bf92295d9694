package volume

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error this package returns for a bad or busy image
// is an *Error that wraps one of these, so callers can test with errors.Is.
var (
	// ErrNotExt4 means the file has no ext4 superblock magic.
	ErrNotExt4 = errors.New("is not an ext4 image")
	// ErrTruncated means the file is shorter than its superblock or than
	// the filesystem the superblock describes.
	ErrTruncated = errors.New("is truncated")
	// ErrBadSuperblock means the magic is there but the superblock is
	// inconsistent (bad checksum, impossible geometry).
	ErrBadSuperblock = errors.New("has a bad ext4 superblock")
	// ErrNotClean means the superblock says the filesystem is mounted, was
	// not unmounted cleanly, or has recorded errors.
	ErrNotClean = errors.New("is not clean")
	// ErrInUse means another process holds the image's lock, or the image
	// is attached to a loop device.
	ErrInUse = errors.New("is in use by another sandbox")
	// ErrFsck means e2fsck found problems in the filesystem.
	ErrFsck = errors.New("has filesystem errors")
	// ErrExists means the destination of Create or Clone already exists.
	ErrExists = errors.New("already exists")
)

// Error describes why an operation refused an image: what was done (Op),
// to which file (Path), the sentinel (Err), the evidence (Detail) and what
// the user can do about it (Fix).
type Error struct {
	Op     string
	Path   string
	Err    error
	Detail string
	Fix    string
}

// Error formats as "OP: volume PATH IS-WHAT (DETAIL); FIX".
func (e *Error) Error() string {
	var b strings.Builder
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	b.WriteString("volume ")
	b.WriteString(e.Path)
	b.WriteString(" ")
	b.WriteString(e.Err.Error())
	if e.Detail != "" {
		b.WriteString(" (")
		b.WriteString(e.Detail)
		b.WriteString(")")
	}
	if e.Fix != "" {
		b.WriteString("; ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// Unwrap returns the sentinel error.
func (e *Error) Unwrap() error { return e.Err }

// withOp returns err with Op set when it is an *Error without one.
func withOp(op string, err error) error {
	var e *Error
	if errors.As(err, &e) && e.Op == "" {
		c := *e
		c.Op = op
		return &c
	}
	return err
}

// wrap adds op to an *Error, or "op path: " to any other error.
func wrap(op, path string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return withOp(op, err)
	}
	return fmt.Errorf("%s %s: %w", op, path, err)
}
