// Package image finds the image a gvx sandbox runs on in containerd.
//
// An image is a containerd reference, or an OCI / docker image archive
// file, imported through containerd's client (what `ctr images import`
// does) and labelled with the file's path, size and modification time, so
// that a later sandbox of the same unchanged file finds it without reading
// the archive again. Images are unpacked for the snapshotter on first use.
package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
)

// ArchiveLabel marks an image imported from an archive: the value is
// Key of the file it came from.
const ArchiveLabel = "dev.gvx.archive"

// Resolver resolves images through one containerd client, one import or
// unpack of an image at a time.
type Resolver struct {
	Client      *client.Client
	Snapshotter string
	// Progress, if set, is told about imports and unpacks.
	Progress func(format string, a ...any)

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// IsArchive reports whether ref names an image archive file rather than a
// containerd reference: a path to an existing regular file.
func IsArchive(ref string) bool {
	st, err := os.Stat(ref)
	return err == nil && st.Mode().IsRegular()
}

// Key identifies an archive file's content by path, size and
// modification time.
func Key(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	return abs + "@" + strconv.FormatInt(st.Size(), 10) + "@" + strconv.FormatInt(st.ModTime().UnixNano(), 10), nil
}

// Resolve returns the image ref names (importing an archive if needed),
// unpacked for the snapshotter.
func (r *Resolver) Resolve(ctx context.Context, ref string) (client.Image, error) {
	unlock := r.lock(ref)
	defer unlock()
	var img client.Image
	var err error
	if IsArchive(ref) {
		img, err = r.archive(ctx, ref)
	} else {
		img, err = r.Client.GetImage(ctx, ref)
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("image %s is not in containerd (%w): give the path of an image archive instead, or import it first", ref, err)
		}
	}
	if err != nil {
		return nil, err
	}
	ok, err := img.IsUnpacked(ctx, r.Snapshotter)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Name(), err)
	}
	if !ok {
		t0 := time.Now()
		r.progress("unpacking %s for %s", img.Name(), r.Snapshotter)
		if err := img.Unpack(ctx, r.Snapshotter); err != nil {
			return nil, fmt.Errorf("unpack %s: %w", img.Name(), err)
		}
		r.progress("unpacked %s in %s", img.Name(), time.Since(t0).Round(time.Millisecond))
	}
	return img, nil
}

// archive finds the image imported from the file at path, importing it
// when the file is new or has changed.
func (r *Resolver) archive(ctx context.Context, path string) (client.Image, error) {
	key, err := Key(path)
	if err != nil {
		return nil, err
	}
	imgs, err := r.Client.ListImages(ctx, fmt.Sprintf("labels.%q==%q", ArchiveLabel, key))
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	if len(imgs) > 0 {
		return imgs[0], nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	r.progress("importing %s (%d MiB)", path, st.Size()>>20)
	recs, err := r.Client.Import(ctx, f,
		client.WithImageLabels(map[string]string{ArchiveLabel: key}),
		client.WithDigestRef(func(d digest.Digest) string { return "import-" + d.Encoded() }),
		client.WithSkipDigestRef(func(name string) bool { return name != "" }))
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	if len(recs) == 0 {
		return nil, errors.New("import " + path + ": the archive holds no image")
	}
	r.progress("imported %s as %s in %s", filepath.Base(path), recs[0].Name, time.Since(t0).Round(time.Millisecond))
	return client.NewImage(r.Client, recs[0]), nil
}

// lock serialises work on one image.
func (r *Resolver) lock(ref string) func() {
	r.mu.Lock()
	if r.locks == nil {
		r.locks = map[string]*sync.Mutex{}
	}
	m, ok := r.locks[ref]
	if !ok {
		m = &sync.Mutex{}
		r.locks[ref] = m
	}
	r.mu.Unlock()
	m.Lock()
	return m.Unlock
}

func (r *Resolver) progress(format string, a ...any) {
	if r.Progress != nil {
		r.Progress(format, a...)
	}
}
