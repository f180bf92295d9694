package snapshotter

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/volume"
)

// kindError attaches an errdefs kind (for errdefs.Is*, and for the gRPC
// status code the snapshot service sends) to an error without changing
// its message.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.err, e.kind} }

// withKind returns err marked as kind (an errdefs error), unless it is
// already marked with some errdefs kind.
func withKind(kind, err error) error {
	if err == nil || hasKind(err) {
		return err
	}
	return &kindError{kind: kind, err: err}
}

// hasKind reports whether err carries an errdefs kind already.
func hasKind(err error) bool {
	for _, k := range []error{
		errdefs.ErrInvalidArgument, errdefs.ErrNotFound, errdefs.ErrAlreadyExists,
		errdefs.ErrFailedPrecondition, errdefs.ErrResourceExhausted, errdefs.ErrUnavailable,
		errdefs.ErrDataLoss, errdefs.ErrAborted, errdefs.ErrNotImplemented, errdefs.ErrPermissionDenied,
		errdefs.ErrConflict, errdefs.ErrOutOfRange, errdefs.ErrInternal,
	} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// classify gives an error from working on an image file an errdefs kind:
// a full disk is ResourceExhausted, a missing or damaged image DataLoss, a
// dirty one FailedPrecondition, a locked one Unavailable.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return withKind(errdefs.ErrResourceExhausted, err)
	case errors.Is(err, os.ErrNotExist),
		errors.Is(err, volume.ErrNotExt4), errors.Is(err, volume.ErrTruncated),
		errors.Is(err, volume.ErrBadSuperblock), errors.Is(err, volume.ErrFsck), errors.Is(err, volume.ErrUnsafe):
		return withKind(errdefs.ErrDataLoss, err)
	case errors.Is(err, volume.ErrNotClean):
		return withKind(errdefs.ErrFailedPrecondition, err)
	case errors.Is(err, volume.ErrInUse):
		return withKind(errdefs.ErrUnavailable, err)
	}
	return err
}

// imageError explains a failure to use the image p of snapshot key: a
// missing or damaged image is DataLoss, with the advice to recreate the
// snapshot; anything else (a full disk, say) is classified as is.
func imageError(key, p string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return withKind(errdefs.ErrDataLoss, fmt.Errorf(
			"image %s of snapshot %s is missing (deleted outside containerd?); remove the snapshot and recreate it", p, key))
	}
	err = classify(err)
	if errors.Is(err, errdefs.ErrDataLoss) {
		return fmt.Errorf("image of snapshot %s is damaged: %w; remove the snapshot and recreate it", key, err)
	}
	if errors.Is(err, errdefs.ErrResourceExhausted) {
		return fmt.Errorf("snapshot %s: %w (the filesystem holding %s is full: free space and retry)", key, err, filepath.Dir(p))
	}
	return fmt.Errorf("snapshot %s: %w", key, err)
}
