package shim

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/log"
)

// containerd's task service restores a task from a checkpoint image in
// its content store by extracting the image into a new directory,
// "ctrd-checkpoint*" in $XDG_RUNTIME_DIR (else the temporary directory),
// and naming that directory in the create request; nothing removes it
// afterwards (containerd v2.4 plugins/services/tasks/local.go), so every
// `ctr c restore` or client NewTask(..., WithTaskCheckpoint) left a full
// copy of the checkpoint — its memory pages and volumes — on the node.
// The copy is the task's: recorded (record.RestoreCopy), removed once the
// restored task has started (gVisor holds the files it still reads open)
// or with the task if it never starts. A directory a user named (a
// restore-from annotation, CRI's RestoreFromPath) is never one.

// restoreCopy reports whether dir is such an extraction.
func restoreCopy(dir string) bool {
	parent := os.Getenv("XDG_RUNTIME_DIR")
	if parent == "" {
		parent = os.TempDir()
	}
	dir = filepath.Clean(dir)
	return strings.HasPrefix(filepath.Base(dir), "ctrd-checkpoint") && filepath.Dir(dir) == filepath.Clean(parent)
}

// removeRestoreCopy removes the restored task's copy of its checkpoint.
func (t *gvxTask) removeRestoreCopy(ctx context.Context) {
	dir := t.rec.RestoreCopy
	if err := os.RemoveAll(dir); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx shim: %s: remove containerd's copy of its checkpoint; it goes with the task", t.rec.ID)
		return
	}
	t.rec.RestoreCopy = ""
	if err := t.rec.save(); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx shim: %s", t.rec.ID)
	}
	log.G(ctx).Debugf("gvx shim: %s: removed containerd's copy of its checkpoint %s", t.rec.ID, dir)
}
