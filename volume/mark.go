package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
)

// MarkDir holds the verified marks: one small file per image that passed
// the full check (Verify) in exactly its current state, named by the
// image's device and inode. It is root-only state on the host, never
// inside an image, so nothing an image's author controls can forge one.
var MarkDir = filepath.Join(api.DefaultStateDir, "verified")

// maxMarks is how many marks MarkDir holds before marks of files that
// are gone are swept.
const maxMarks = 4096

// fileState identifies one state of a file: a write, truncate, chmod,
// chown or rename of it changes its ctime, which nobody can set.
type fileState struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
	uid          uint32
	mode         uint32
}

func stateOf(f *os.File) (fileState, error) {
	st, err := f.Stat()
	if err != nil {
		return fileState{}, err
	}
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileState{}, fmt.Errorf("%s: no stat_t", f.Name())
	}
	return fileState{dev: uint64(s.Dev), ino: s.Ino, size: s.Size,
		mtime: time.Unix(s.Mtim.Unix()).UnixNano(), ctime: time.Unix(s.Ctim.Unix()).UnixNano(),
		uid: s.Uid, mode: s.Mode}, nil
}

// markable: only root can change a root-owned file nobody else may write,
// so a mark of its state stays true until root changes it.
func (s fileState) markable() bool { return s.uid == 0 && s.mode&0o022 == 0 }

func (s fileState) markPath() string {
	return filepath.Join(MarkDir, fmt.Sprintf("%x-%x", s.dev, s.ino))
}

func (s fileState) markLine(path string) string {
	return fmt.Sprintf("v1 %d %d %d %s\n", s.size, s.mtime, s.ctime, path)
}

// marked reports whether f carries a valid verified mark: it passed the
// full check in the state it is in now.
func marked(f *os.File, path string) bool {
	s, err := stateOf(f)
	if err != nil || !s.markable() {
		return false
	}
	b, err := os.ReadFile(s.markPath())
	if err != nil {
		return false
	}
	// The path is informational (for sweeping); the state decides.
	have, _, _ := strings.Cut(string(b), " /")
	want, _, _ := strings.Cut(s.markLine(path), " /")
	return have == want
}

// mark records that f, in state before (taken before it was checked),
// passed the full check; it does nothing if f changed meanwhile or is
// not markable. Failing to mark costs only a full check next time.
func mark(ctx context.Context, f *os.File, path string, before fileState) {
	now, err := stateOf(f)
	if err != nil || now != before || !now.markable() {
		return
	}
	abs, _ := filepath.Abs(path)
	// The state directory above is one the sandboxes' unprivileged host
	// processes traverse (0711, as the shim makes it); only the marks are
	// root's alone. Made here first, MkdirAll would give it 0700.
	err = os.MkdirAll(filepath.Dir(MarkDir), 0o711)
	if err == nil {
		err = os.Mkdir(MarkDir, 0o700)
		if errors.Is(err, os.ErrExist) {
			err = nil
		}
	}
	if err == nil {
		sweepMarks()
		err = api.WriteFile(now.markPath(), []byte(now.markLine(abs)), 0o600)
	}
	if err != nil {
		log.G(ctx).WithError(err).WithField("volume", path).Debug("volume: verified mark not written")
	}
}

// unmark drops f's mark (after Remove, or when f failed a check).
func unmark(f *os.File) {
	if s, err := stateOf(f); err == nil {
		os.Remove(s.markPath())
	}
}

// sweepMarks removes, once MarkDir holds maxMarks marks, the marks of
// files that no longer exist as marked.
func sweepMarks() {
	entries, err := os.ReadDir(MarkDir)
	if err != nil || len(entries) < maxMarks {
		return
	}
	for _, e := range entries {
		p := filepath.Join(MarkDir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		_, img, _ := strings.Cut(strings.TrimSpace(string(b)), " /")
		f, err := os.Open("/" + img)
		if err == nil {
			s, serr := stateOf(f)
			f.Close()
			if serr == nil && s.markPath() == p {
				continue
			}
		}
		os.Remove(p)
	}
}
