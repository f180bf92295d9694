package shim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/checkpoint"
	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/internal/digest"
	"github.com/gvxrun/gvx/internal/filecopy"
)

// The guest of a proxied docker-mode sandbox runs gvx-relay from a
// read-only bind mount (oci.DockerRelay), and keeps running it: its server
// is a process of the guest. A checkpoint saves that process, whose code
// gVisor maps from the mounted file; a restore onto other bytes (the
// host's gvx-relay replaced by an upgrade since) would run the saved
// process on code that is not its own. So the sandbox mounts a copy named
// by its content (api.Layout.Relay), which is never changed, a checkpoint
// keeps a copy of that in its image (checkpoint.RelayFile) and the
// manifest its digest, and a restore mounts the copy of that digest,
// putting the image's back in the state directory when the node no longer
// has it (the default state directory is a tmpfs, emptied at boot).

// relayCopy is the copy of gvx-relay the task's guest runs (relaybin.go):
// the one a restored checkpoint names, else one of the host's.
func (t *gvxTask) relayCopy() (string, error) {
	if t.restoring != nil && t.restoring.Relay != "" {
		t.relay = t.restoring.Relay
		return restoredRelay(t.layout, t.checkpointDir, t.relay)
	}
	src, err := config.RelayPath(t.rec.Sentry)
	if err != nil {
		return "", err
	}
	if t.restoring != nil {
		// Saved before checkpoints kept their relay: the host's, as then.
		return src, nil
	}
	p, sum, err := storeRelay(t.layout, src)
	if err != nil {
		return "", err
	}
	t.relay = sum
	return p, nil
}

// storeRelay returns the copy of gvx-relay src in l's relay store, and its
// digest, making the copy if the store lacks it.
func storeRelay(l api.Layout, src string) (path, sum string, err error) {
	if sum, err = digest.File(src); err != nil {
		return "", "", fmt.Errorf("gvx-relay %s: %w", src, err)
	}
	path = l.Relay(sum)
	if err := putRelay(l, src, path); err != nil {
		return "", "", fmt.Errorf("gvx-relay %s: %w", src, err)
	}
	return path, sum, nil
}

// restoredRelay returns the copy of the gvx-relay that checkpoint image dir
// names (its sha256, sum), taking it from the image when the store lacks it.
func restoredRelay(l api.Layout, dir, sum string) (string, error) {
	if !digest.Valid(sum) {
		// The manifest is the image's: a path instead of a digest
		// would name a host file outside the store.
		return "", fmt.Errorf("checkpoint %s: its manifest's relay %q is not a sha256 (64 hex digits): the image is damaged; take the checkpoint again", dir, sum)
	}
	path := l.Relay(sum)
	if used(path) {
		return path, nil
	}
	saved := filepath.Join(dir, checkpoint.RelayFile)
	got, err := digest.File(saved)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("checkpoint %s names gvx-relay %s, which neither it (%s) nor this node (%s) has: restore it where it was made, or take the checkpoint again", dir, sum, checkpoint.RelayFile, path)
	case err != nil:
		return "", fmt.Errorf("checkpoint %s: its gvx-relay: %w", dir, err)
	case got != sum:
		return "", fmt.Errorf("checkpoint %s: its %s has sha256 %s, its manifest says %s: the image is damaged; take the checkpoint again", dir, checkpoint.RelayFile, got, sum)
	}
	if err := putRelay(l, saved, path); err != nil {
		return "", fmt.Errorf("checkpoint %s: its gvx-relay: %w", dir, err)
	}
	return path, nil
}

// putRelay makes path, if it is not there, a copy of src (read-only, for
// every uid: the sandbox's gofer opens it as the sandbox's host uid). A
// copy is written under a temporary name and renamed into place, so two
// shims making one at once both end with a whole file.
func putRelay(l api.Layout, src, path string) error {
	if used(path) {
		return nil
	}
	if err := os.MkdirAll(l.RelaysDir(), 0o711); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(l.RelaysDir(), ".tmp-")
	if err != nil {
		return err
	}
	name := tmp.Name()
	tmp.Close()
	defer os.Remove(name)
	if err := filecopy.File(src, name, 0o555); err != nil {
		return err
	}
	return os.Rename(name, path)
}

// used says whether relay copy path exists, and marks it used now: `gvx
// gc` removes a copy no sandbox mounts only an hour after its last use.
func used(path string) bool {
	now := time.Now()
	return os.Chtimes(path, now, now) == nil
}
