package gvx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/internal/loopdev"
	"github.com/gvxrun/gvx/volume"
)

// prepareMounts clones the volumes that ask for it, makes the published
// sockets' directories, and returns the spec's mounts. What it makes is
// recorded in s.owned as it goes.
func (s *Sandbox) prepareMounts(ctx context.Context) ([]specs.Mount, error) {
	var out []specs.Mount
	for _, m := range s.cfg.Mounts {
		src, err := filepath.Abs(m.Source)
		if err != nil {
			return nil, newError("new", s.id, ErrInvalid, err)
		}
		switch m.Type {
		case MountBind:
			out = append(out, specs.Mount{Destination: m.Target, Type: "bind", Source: src, Options: []string{"rbind", "ro"}})
			continue
		}
		if m.Clone {
			dst := clonePath(src, s.id)
			t0 := time.Now()
			method, err := volume.Clone(ctx, src, dst, volume.CloneOptions{})
			if err != nil {
				return nil, newError("new", s.id, nil, fmt.Errorf("clone volume %s: %w", src, err))
			}
			s.owned.Volumes = append(s.owned.Volumes, dst)
			if d := time.Since(t0); d > time.Second {
				s.c.progressf("%s: cloned %s by %s in %s", s.id, filepath.Base(src), method, d.Round(time.Millisecond))
			}
			src = dst
		}
		opt := "rw"
		if m.ReadOnly {
			opt = "ro"
		}
		out = append(out, specs.Mount{Destination: m.Target, Type: "ext4", Source: src, Options: []string{opt}})
	}
	for i, p := range s.cfg.Publish {
		dir, err := s.publishDir(i)
		if err != nil {
			return nil, newError("new", s.id, nil, fmt.Errorf("publish %s: %w", p.HostPath, err))
		}
		guest := path.Clean(p.GuestPath)
		if err := os.Symlink(filepath.Join(dir, path.Base(guest)), p.HostPath); err != nil {
			kind := error(nil)
			if errors.Is(err, os.ErrExist) {
				kind = ErrExists
				err = fmt.Errorf("%w: remove it or publish elsewhere", err)
			}
			return nil, newError("new", s.id, kind, fmt.Errorf("publish %s: %w", p.HostPath, err))
		}
		s.owned.Files = append(s.owned.Files, p.HostPath)
		out = append(out, specs.Mount{Destination: path.Dir(guest), Type: "bind", Source: dir, Options: []string{"rbind", "rw"}})
	}
	return out, nil
}

// clonePath is where sandbox id's clone of volume src goes: next to it,
// so that a reflink can make it.
func clonePath(src, id string) string {
	base := strings.TrimSuffix(filepath.Base(src), ".ext4")
	return filepath.Join(filepath.Dir(src), "."+base+"-"+id+".ext4")
}

// publishDir makes the host directory of published socket i: owned by
// the sandbox's host uid, where the guest's socket appears.
func (s *Sandbox) publishDir(i int) (string, error) {
	parent := filepath.Join(s.c.opts.StateDir, "publish", s.c.opts.Namespace, s.id)
	for _, d := range []string{filepath.Join(s.c.opts.StateDir, "publish"), filepath.Dir(parent), parent} {
		if err := os.Mkdir(d, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
	if len(s.owned.Files) == 0 || s.owned.Files[0] != parent {
		s.owned.Files = append([]string{parent}, s.owned.Files...)
	}
	dir := filepath.Join(parent, strconv.Itoa(i))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	u := s.c.cfg.UserNS
	if err := os.Chown(dir, int(u.HostUID), int(u.HostGID)); err != nil {
		return "", err
	}
	return dir, nil
}

// releaseOwned removes what prepareMounts made: published sockets'
// links and directories, and volume clones once no loop device holds
// them any more.
func (s *Sandbox) releaseOwned(ctx context.Context) error {
	var errs []error
	if err := removeAll(s.owned.Files); err != nil {
		errs = append(errs, err)
	}
	for _, v := range s.owned.Volumes {
		if err := loopdev.WaitDetached(ctx, v); err != nil {
			errs = append(errs, fmt.Errorf("volume clone: %w", err))
			continue
		}
		if err := os.Remove(v); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
