package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/volume"
)

// templates caches the empty template image of each size: one clean,
// empty ext4 filesystem without lost+found, made once with volume.Create
// and cloned for every snapshot without a parent.
type templates struct {
	dir string

	mu    sync.Mutex
	ready map[int64]bool // verified this process
}

func (t *templates) init(dir string) {
	t.dir = dir
	t.ready = map[int64]bool{}
}

// path is the template of size bytes.
func (t *templates) path(size int64) string {
	return filepath.Join(t.dir, fmt.Sprintf("empty-%d", size))
}

// get returns the template of size bytes, making it if needed. hook is
// called between making it and renaming it into place.
func (t *templates) get(ctx context.Context, size int64, hook func(string)) (string, error) {
	p := t.path(size)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ready[size] {
		return p, nil
	}
	info, err := volume.Inspect(ctx, p)
	switch {
	case err == nil && info.Clean && info.Size == size:
		t.ready[size] = true
		return p, nil
	case err == nil:
		log.G(ctx).WithField("template", p).WithField("state", info.State).Warn("ext4lite: template unusable, making a new one")
	case !errors.Is(err, os.ErrNotExist):
		log.G(ctx).WithError(err).WithField("template", p).Warn("ext4lite: template unusable, making a new one")
	}
	if err := t.make(ctx, p, size, hook); err != nil {
		return "", fmt.Errorf("empty template of %s: %w", volume.FormatSize(size), err)
	}
	t.ready[size] = true
	return p, nil
}

// forget drops size from the cache, so the next get verifies (and if
// needed remakes) the template.
func (t *templates) forget(size int64) {
	t.mu.Lock()
	delete(t.ready, size)
	t.mu.Unlock()
}

// make creates the template p as templates/new-*, removes its
// lost+found, and renames it to p.
func (t *templates) make(ctx context.Context, p string, size int64, hook func(string)) error {
	tmp := filepath.Join(t.dir, "new-"+randomName())
	if _, err := volume.Create(ctx, tmp, volume.CreateOptions{Size: size}); err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmp)
		}
	}()
	if err := removeLostFound(ctx, tmp); err != nil {
		return err
	}
	hook(HookTemplateStaged)
	if err := os.Rename(tmp, p); err != nil {
		return err
	}
	ok = true
	if err := syncDir(t.dir); err != nil {
		return err
	}
	log.G(ctx).WithField("template", p).Info("ext4lite: empty template made")
	return nil
}

// cleanStaging removes templates/new-* left by a process that died while
// making one.
func (t *templates) cleanStaging(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	left, err := filepath.Glob(filepath.Join(t.dir, "new-*"))
	if err != nil {
		return err
	}
	for _, p := range left {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		log.G(ctx).WithField("path", p).Info("ext4lite: removed abandoned template")
	}
	return nil
}

// removeLostFound deletes /lost+found from the unmounted image at p with
// debugfs (no mount needed) and checks that the root directory is then
// empty: an unpacked image must hold exactly the image's files. e2fsck
// does not recreate lost+found unless it has orphans to put there.
func removeLostFound(ctx context.Context, p string) error {
	if _, err := debugfs(ctx, "-w", "-R", "rmdir lost+found", p); err != nil {
		return err
	}
	out, err := debugfs(ctx, "-R", "ls -p /", p)
	if err != nil {
		return err
	}
	// ls -p prints /INODE/MODE/UID/GID/NAME/SIZE/ per entry.
	for _, l := range strings.Split(out, "\n") {
		f := strings.Split(l, "/")
		if len(f) >= 6 && f[5] != "." && f[5] != ".." {
			return fmt.Errorf("debugfs left %q in the root directory of %s", f[5], p)
		}
	}
	return nil
}

// debugfs runs debugfs and returns its stdout. debugfs exits 0 even when
// a request fails, so anything on stderr besides its version banner is
// an error.
func debugfs(ctx context.Context, args ...string) (string, error) {
	bin, err := volume.Tool("debugfs")
	if err != nil {
		return "", err
	}
	var stdout, stderr strings.Builder
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	err = cmd.Run()
	var msgs []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "debugfs ") {
			msgs = append(msgs, l)
		}
	}
	if err != nil {
		msgs = append([]string{err.Error()}, msgs...)
	}
	if len(msgs) > 0 {
		return "", fmt.Errorf("debugfs %s: %s", strings.Join(args, " "), strings.Join(msgs, "; "))
	}
	return stdout.String(), nil
}
