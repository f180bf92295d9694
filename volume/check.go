package volume

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/internal/flock"
)

// Check runs a full read-only check (e2fsck -fn) of the image at path. It
// refuses images in use (leased, or attached to a loop device: a live
// filesystem would show bogus errors) and returns nil only when the
// superblock is clean and e2fsck finds nothing; otherwise an *Error
// wrapping ErrNotClean or ErrFsck with e2fsck's verdict as detail.
func Check(ctx context.Context, path string) error {
	f, err := lockPath(path, os.O_RDONLY, unix.LOCK_SH)
	if err != nil {
		return wrap("check", path, err)
	}
	defer flock.Close(f)
	if err := checkNotAttached(f, path); err != nil {
		return withOp("check", err)
	}
	info, sb, err := inspectFile(f, path)
	if err != nil {
		return withOp("check", err)
	}
	res, err := run(ctx, "e2fsck", "-fn", path)
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	if res.exitCode != 0 {
		return &Error{Op: "check", Path: path, Err: ErrFsck,
			Detail: fmt.Sprintf("e2fsck -fn exit %d: %s", res.exitCode, summary(res.output, 4)),
			Fix:    "repair a copy or the unmounted image with `e2fsck -fy " + path + "`, or restore it from its source"}
	}
	if !info.Clean {
		return &Error{Op: "check", Path: path, Err: ErrNotClean, Detail: info.State,
			Fix: "replay the journal with `e2fsck -fp " + path + "` while it is unmounted"}
	}
	// e2fsck passed; the structural checks decide whether a sandbox may
	// mount it, and a pass marks it.
	return withOp("check", verifyWith(ctx, f, path, info, sb, true, false))
}

// fsckFix runs e2fsck -fp (preen: replay the journal, fix what is safe)
// as resize2fs demands. Exit codes 0-2 mean clean or fixed.
func fsckFix(ctx context.Context, path string) error {
	res, err := run(ctx, "e2fsck", "-fp", path)
	if err != nil {
		return err
	}
	if res.exitCode&^3 != 0 {
		return &Error{Path: path, Err: ErrFsck,
			Detail: fmt.Sprintf("e2fsck -fp exit %d: %s", res.exitCode, summary(res.output, 4)),
			Fix:    "repair it with `e2fsck -fy " + path + "` first"}
	}
	return nil
}
