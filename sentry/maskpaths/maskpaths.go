// Package maskpaths applies a spec's linux.maskedPaths and
// linux.readonlyPaths, which gVisor ignores, as mounts gVisor does apply.
//
// runc masks a path by mounting /dev/null over a file and an empty
// read-only tmpfs over a directory, and makes a path read-only by
// remounting a bind mount of it read-only. Rewrite does the same in the
// spec before gVisor reads it:
//
//   - a masked file gets a read-only bind mount of an empty, non-executable
//     file (reads see nothing, an exec fails with EACCES, writes with EROFS);
//   - a masked directory gets an empty read-only tmpfs;
//   - a read-only path gets a read-only bind mount of itself (its host
//     source: the root filesystem's, or a bind mount's it lies in).
//
// Paths in /proc, /sys and /dev are left to gVisor: those are the Sentry's
// own synthetic filesystems, which expose none of the host kernel's state
// the default masks hide (/proc/kcore, /proc/keys, /sys/firmware, …) and
// whose /proc/sys changes only the sandbox's kernel. A path that does not
// exist needs nothing, as under runc.
package maskpaths

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// synthetic are the destinations whose filesystems are gVisor's own.
var synthetic = []string{"/proc", "/sys", "/dev"}

// Rewrite turns s's masked and read-only paths into mounts appended to its
// mounts (after every other, so that they cover them) and clears the two
// lists; a spec whose paths all lie in gVisor's own filesystems is left
// alone. emptyFile is the host path of an empty read-only file for masked
// files. It reports whether it changed s.
func Rewrite(s *specs.Spec, emptyFile string) (bool, error) {
	if s.Linux == nil || len(s.Linux.MaskedPaths)+len(s.Linux.ReadonlyPaths) == 0 {
		return false, nil
	}
	if s.Root == nil || s.Root.Path == "" {
		return false, errors.New("maskedPaths/readonlyPaths: the spec has no root path")
	}
	var extra []specs.Mount
	for _, p := range s.Linux.ReadonlyPaths {
		src, fi, ok, err := hostSource(s, p)
		if err != nil {
			return false, fmt.Errorf("readonly path %s: %w", p, err)
		}
		if !ok || fi == nil {
			continue
		}
		extra = append(extra, specs.Mount{Destination: path.Clean(p), Type: "bind", Source: src, Options: []string{"rbind", "ro"}})
	}
	for _, p := range s.Linux.MaskedPaths {
		_, fi, ok, err := hostSource(s, p)
		if err != nil {
			return false, fmt.Errorf("masked path %s: %w", p, err)
		}
		switch {
		case !ok || fi == nil:
		case fi.IsDir():
			extra = append(extra, specs.Mount{Destination: path.Clean(p), Type: "tmpfs", Source: "tmpfs", Options: []string{"ro", "nosuid", "nodev", "noexec", "size=0"}})
		default:
			extra = append(extra, specs.Mount{Destination: path.Clean(p), Type: "bind", Source: emptyFile, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
		}
	}
	if len(extra) == 0 {
		// Only gVisor's own filesystems' paths (containerd's defaults):
		// the spec stays as it is.
		return false, nil
	}
	s.Mounts = append(s.Mounts, extra...)
	s.Linux.MaskedPaths, s.Linux.ReadonlyPaths = nil, nil
	return true, nil
}

// hostSource finds container path p on the host: under the bind mount with
// the longest destination containing it, else under the root filesystem.
// ok is false for a path gVisor's own filesystems (or a non-bind mount)
// serve; fi is nil for a path that does not exist.
func hostSource(s *specs.Spec, p string) (string, os.FileInfo, bool, error) {
	if !path.IsAbs(p) {
		return "", nil, false, fmt.Errorf("not an absolute path")
	}
	p = path.Clean(p)
	for _, d := range synthetic {
		if under(p, d) {
			return "", nil, false, nil
		}
	}
	src, rel := s.Root.Path, p
	best := ""
	for _, m := range s.Mounts {
		d := path.Clean(m.Destination)
		if !under(p, d) || len(d) <= len(best) {
			continue
		}
		best = d
		if m.Type != "bind" && !hasOption(m.Options, "bind") && !hasOption(m.Options, "rbind") {
			src = ""
			continue
		}
		src, rel = m.Source, strings.TrimPrefix(p, d)
	}
	if src == "" {
		return "", nil, false, nil
	}
	full, err := resolveIn(src, rel)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil, true, nil
	}
	if err != nil {
		return "", nil, false, err
	}
	fi, err := os.Stat(full)
	if err != nil {
		return "", nil, false, err
	}
	return full, fi, true, nil
}

// maxLinks bounds the symlinks resolveIn follows, as Linux's MAXSYMLINKS.
const maxLinks = 40

// resolveIn resolves rel inside root as the container would see it: its
// symlinks, absolute or relative, stay inside root (a link to /etc/shadow
// in an image is root's etc/shadow, never the host's). It returns a host
// path without symlinks below root.
func resolveIn(root, rel string) (string, error) {
	var done []string
	todo := strings.Split(strings.Trim(path.Clean("/"+rel), "/"), "/")
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		cur := filepath.Join(root, filepath.Join(append(done, c)...))
		fi, err := os.Lstat(cur)
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			done = append(done, c)
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("too many levels of symbolic links at %s", cur)
		}
		target, err := os.Readlink(cur)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			done = nil
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return filepath.Join(root, filepath.Join(done...)), nil
}

func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

func hasOption(opts []string, o string) bool {
	for _, x := range opts {
		if x == o {
			return true
		}
	}
	return false
}
