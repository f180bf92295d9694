package shim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/log"
)

// dirsFile in a bundle lists the per-task directories gvx created outside
// the bundle (volume staging, docker socket), one per line, so that
// cleanup after a crash (Manager.Stop) removes them too.
const dirsFile = "gvx-dirs"

// makeTaskDir creates dir (parents traverse-only, 0711) and records it in
// the bundle's dirsFile.
func makeTaskDir(bundle, dir string, mode os.FileMode, uid, gid int) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, mode); err != nil && !os.IsExist(err) {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		return err
	}
	if uid >= 0 {
		if err := os.Chown(dir, uid, gid); err != nil {
			return fmt.Errorf("chown %s: %w", dir, err)
		}
	}
	f, err := os.OpenFile(filepath.Join(bundle, dirsFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("record task dir: %w", err)
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, dir)
	return err
}

// removeTaskDirs removes the directories recorded in the bundle, and their
// namespace directories once empty.
func removeTaskDirs(ctx context.Context, bundle string) {
	data, err := os.ReadFile(filepath.Join(bundle, dirsFile))
	if err != nil {
		return
	}
	for _, dir := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if dir == "" {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx shim: remove %s", dir)
		}
		_ = os.Remove(filepath.Dir(dir)) // the namespace dir, if empty
	}
	_ = os.Remove(filepath.Join(bundle, dirsFile))
}
