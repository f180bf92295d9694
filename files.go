package gvx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// The file calls run the image's own /bin/sh, cat and tar in the sandbox:
// writes to the root filesystem live in the sandbox's memory (gVisor's
// overlay), where no host path reaches them, and an image pool's
// sandboxes (the fast path) take no extra mounts, so a helper binary
// could not be put in. Images without those tools get ErrUnsupported.

// Exit statuses of the file scripts.
const (
	exitNoFile = 44
	exitIsDir  = 45
	exitMkdir  = 46
)

const (
	readScript  = `[ -e "$1" ] || exit 44; [ -d "$1" ] && exit 45; exec cat -- "$1"`
	writeScript = `d=${1%/*}; [ -z "$d" ] || mkdir -p -- "$d" || exit 46; [ -d "$1" ] && exit 45; cat > "$1" && chmod "$2" "$1"`
	inScript    = `mkdir -p -- "$1" || exit 46; exec tar -x -f - -C "$1"`
	outScript   = `[ -e "$1/$2" ] || exit 44; exec tar -c -f - -C "$1" "./$2"`
)

// WriteFile writes data to the file name in the sandbox, as the
// sandbox's user (Config.User), creating its directories and setting its
// permissions to mode.
func (s *Sandbox) WriteFile(ctx context.Context, name string, data []byte, mode os.FileMode) error {
	if !path.IsAbs(name) {
		return errorf("write file in", s.id, ErrInvalid, "%q: want an absolute path", name)
	}
	_, err := s.fileOp(ctx, "write file in", name, bytes.NewReader(data), nil, writeScript, name, fmt.Sprintf("%o", mode.Perm()))
	return err
}

// ReadFile reads the file name in the sandbox, as the sandbox's user.
func (s *Sandbox) ReadFile(ctx context.Context, name string) ([]byte, error) {
	if !path.IsAbs(name) {
		return nil, errorf("read file in", s.id, ErrInvalid, "%q: want an absolute path", name)
	}
	return s.fileOp(ctx, "read file in", name, nil, nil, readScript, name)
}

// CopyIn unpacks a tar stream into the directory dir in the sandbox
// (created if missing), as the sandbox's user: what `tar -x -C dir` does.
func (s *Sandbox) CopyIn(ctx context.Context, dir string, tar io.Reader) error {
	if !path.IsAbs(dir) {
		return errorf("copy into", s.id, ErrInvalid, "%q: want an absolute path", dir)
	}
	_, err := s.fileOp(ctx, "copy into", dir, tar, nil, inScript, dir)
	return err
}

// CopyOut writes a tar stream of the file or directory name in the
// sandbox to w; its entries are named ./<base name of name>/….
func (s *Sandbox) CopyOut(ctx context.Context, name string, w io.Writer) error {
	if !path.IsAbs(name) || path.Clean(name) == "/" {
		return errorf("copy out of", s.id, ErrInvalid, "%q: want an absolute path below /", name)
	}
	clean := path.Clean(name)
	_, err := s.fileOp(ctx, "copy out of", name, nil, w, outScript, path.Dir(clean), path.Base(clean))
	return err
}

// fileOp runs a file script with args, stdin in and stdout out (nil:
// returned), and turns its exit status into an error.
func (s *Sandbox) fileOp(ctx context.Context, op, name string, in io.Reader, out io.Writer, script string, args ...string) ([]byte, error) {
	res, err := s.Exec(ctx, append([]string{"/bin/sh", "-c", script, "sh"}, args...), ExecOptions{Stdin: in, Stdout: out})
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, errorf(op, s.id, ErrUnsupported, "%s: the image has no /bin/sh, which gvx's file calls use", name)
		}
		return nil, err
	}
	msg := strings.TrimSpace(string(res.Stderr))
	switch res.ExitCode {
	case 0:
		return res.Stdout, nil
	case exitNoFile:
		return nil, errorf(op, s.id, ErrNotFound, "%s: no such file or directory", name)
	case exitIsDir:
		return nil, errorf(op, s.id, ErrInvalid, "%s is a directory", name)
	case exitMkdir:
		return nil, errorf(op, s.id, nil, "%s: cannot make its directory: %s", name, msg)
	case 127:
		return nil, errorf(op, s.id, ErrUnsupported, "%s: the image lacks a tool gvx's file calls use (cat, tar, mkdir, chmod): %s", name, msg)
	}
	return nil, errorf(op, s.id, nil, "%s: exit %d: %s", name, res.ExitCode, msg)
}
