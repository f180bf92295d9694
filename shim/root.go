package shim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// nullNetNS is the file under a sentry root where gVisor pins an empty
// network namespace for its gofers (runsc/specutils.NullNetNSFilename).
const nullNetNS = "null-netns"

// sentryRoot is the state directory of one task's sandbox. Each gets its
// own, so its teardown can remove everything gVisor put there, including
// the null-netns bind mount, without racing other sandboxes (and runsc's
// prefix matching of container ids never sees two ids).
func sentryRoot(base, id string) string {
	return filepath.Join(base, id)
}

// releaseSentryRoot removes dir (a sentry root for one namespace, as the
// runc shim computes it: <root>/<namespace>) once no sandbox state remains
// in it, and its parent if that is then empty. It is a no-op while any
// sandbox is still recorded there.
func releaseSentryRoot(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read sentry root: %w", err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".state") {
			return nil
		}
	}
	// Concurrent sandbox creation may stack several bind mounts here.
	for unix.Unmount(filepath.Join(dir, nullNetNS), unix.MNT_DETACH) == nil {
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove sentry root: %w", err)
	}
	if err := os.Remove(filepath.Dir(dir)); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("remove sentry root: %w", err)
	}
	return nil
}
