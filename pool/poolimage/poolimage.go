// Package poolimage opens the image of an image pool ([pool] image).
//
// It looks the image up in containerd, leases its layer snapshots and
// mounts them for the pool's sandboxes. It is the pool server's only
// dependency on the containerd client, kept out of package pool so that
// only `gvx pool serve` links it.
package poolimage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/image-spec/identity"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/oci"
	"github.com/gvxrun/gvx/pool"
	"github.com/gvxrun/gvx/pool/adopt"
	"github.com/gvxrun/gvx/pool/bootspec"
	"github.com/gvxrun/gvx/sandbox"
)

// image is the pool's image, mounted read-only (idmapped to the sandboxes'
// host ids) as the root filesystem of every pool sandbox's root container.
// A containerd lease on its top layer snapshot keeps the layers from
// garbage collection while sandboxes use them.
type image struct {
	ref    string
	dir    string
	pool   api.PoolDir
	layers []string
	client *client.Client
	ns     string
	lease  string
}

// Opener returns the pool.ImageOpener of cfg's image pool.
func Opener(cfg config.Config) pool.ImageOpener {
	return func(ctx context.Context, dir, pause string) (pool.Image, error) {
		return open(ctx, cfg, dir, pause)
	}
}

// open looks cfg's pool image up in containerd (unpacking it when it is
// not), leases its layers and mounts them at dir, with the gvx-pause binary
// at pause added as bootspec.PauseInImage.
func open(ctx context.Context, cfg config.Config, dir, pause string) (_ *image, retErr error) {
	p := cfg.Pool
	c, err := client.New(p.Containerd, client.WithDefaultNamespace(p.Namespace), client.WithTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("pool.image %q: connect to containerd at %s (pool.containerd): %w", p.Image, p.Containerd, err)
	}
	im := &image{ref: p.Image, dir: dir, pool: cfg.PoolDir(), client: c, ns: p.Namespace}
	defer func() {
		if retErr != nil {
			im.Close(context.WithoutCancel(ctx), false)
		}
	}()
	ctx = namespaces.WithNamespace(ctx, p.Namespace)
	img, err := c.GetImage(ctx, p.Image)
	if err != nil {
		return nil, fmt.Errorf("pool.image %q in containerd namespace %q: %w (pull or import it first, e.g. `ctr -n %s images import`)", p.Image, p.Namespace, err, p.Namespace)
	}
	unpacked, err := img.IsUnpacked(ctx, p.Snapshotter)
	if err != nil {
		return nil, fmt.Errorf("pool.image %q: %w", p.Image, err)
	}
	if !unpacked {
		log.G(ctx).Infof("gvx pool: unpacking %s for snapshotter %s", p.Image, p.Snapshotter)
		if err := img.Unpack(ctx, p.Snapshotter); err != nil {
			return nil, fmt.Errorf("pool.image %q: unpack for %s: %w", p.Image, p.Snapshotter, err)
		}
	}
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		return nil, fmt.Errorf("pool.image %q: layers: %w", p.Image, err)
	}
	chain := identity.ChainID(diffIDs).String()

	// A new lease first, then the previous server's go (it may have been
	// killed): the layers are never unprotected.
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	ls := c.LeasesService()
	lease, err := ls.Create(ctx, leases.WithID("gvx-pool-"+hex.EncodeToString(rnd[:])), leases.WithLabel(api.LeaseLabel, string(cfg.PoolDir())))
	if err != nil {
		return nil, fmt.Errorf("pool.image %q: lease: %w", p.Image, err)
	}
	im.lease = lease.ID
	if err := ls.AddResource(ctx, lease, leases.Resource{ID: chain, Type: "snapshots/" + p.Snapshotter}); err != nil {
		return nil, fmt.Errorf("pool.image %q: lease its layers: %w", p.Image, err)
	}
	im.deleteLeases(ctx, string(cfg.PoolDir()), lease.ID)

	// The layers' mounts, as a view would have them: the view itself is
	// removed at once, its mounts name only the image's committed layers.
	sn := c.SnapshotService(p.Snapshotter)
	lctx := leases.WithLease(ctx, lease.ID)
	key := lease.ID + "-view"
	mounts, err := sn.View(lctx, key, chain)
	if err != nil {
		return nil, fmt.Errorf("pool.image %q: view of its layers: %w", p.Image, err)
	}
	if err := sn.Remove(lctx, key); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx pool: remove view %s", key)
	}
	im.layers = adopt.Layers(mounts)
	if im.layers == nil {
		return nil, fmt.Errorf("pool.image %q: snapshotter %s gives its layers as %+v, not as an overlay or a read-only bind mount: use the overlayfs snapshotter (pool.snapshotter)", p.Image, p.Snapshotter, mounts)
	}
	// The layers under an upper directory of the pool's own that holds
	// gvx-pause: the root container's init needs a file on the image, and
	// the sandbox's gofer cannot make a mount point in read-only layers.
	// The sandboxes never write to it (their writes go to their memory).
	sandbox.UnmountImage(cfg.PoolDir()) // a killed server's, with its upper directory
	upper, work := cfg.PoolDir().ImageUpper()+"/upper", cfg.PoolDir().ImageUpper()+"/work"
	for _, d := range []string{dir, upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("pool.image: create %s: %w", d, err)
		}
	}
	if err := os.Link(pause, filepath.Join(upper, strings.TrimPrefix(bootspec.PauseInImage, "/"))); err != nil {
		return nil, fmt.Errorf("pool.image: install %s: %w", api.PauseBinary, err)
	}
	m := oci.Mapping{HostUID: cfg.UserNS.HostUID, HostGID: cfg.UserNS.HostGID, Size: cfg.UserNS.Size}
	opts := []string{"index=off", "lowerdir=" + strings.Join(im.layers, ":"), "upperdir=" + upper, "workdir=" + work}
	root := mount.Mount{Type: "overlay", Source: "overlay", Options: append(opts, m.IDMapOptions()...)}
	if err := mount.All([]mount.Mount{root}, dir); err != nil {
		return nil, fmt.Errorf("pool.image %q: mount its layers at %s (idmapped to host uid %d): %w", p.Image, dir, m.HostUID, err)
	}
	log.G(ctx).Infof("gvx pool: image %s (%d layers) mounted at %s", p.Image, len(im.layers), dir)
	return im, nil
}

// deleteLeases deletes this pool's leases other than keep: those of a
// server that was killed or stopped while its sandboxes still ran.
func (im *image) deleteLeases(ctx context.Context, owner, keep string) {
	ls := im.client.LeasesService()
	all, err := ls.List(ctx, fmt.Sprintf("labels.%q==%q", api.LeaseLabel, owner))
	if err != nil {
		log.G(ctx).WithError(err).Warn("gvx pool: list leases")
		return
	}
	for _, l := range all {
		if l.ID == keep {
			continue
		}
		if err := ls.Delete(ctx, l); err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).WithError(err).Warnf("gvx pool: delete lease %s", l.ID)
		} else {
			log.G(ctx).Infof("gvx pool: deleted lease %s of an earlier server", l.ID)
		}
	}
}

// Ref implements pool.Image.
func (im *image) Ref() string { return im.ref }

// Dir implements pool.Image.
func (im *image) Dir() string { return im.dir }

// Layers implements pool.Image.
func (im *image) Layers() []string { return im.layers }

// Close unmounts the image (sandboxes booted on it keep their own mount of
// it) and, unless keepLease (claimed sandboxes still run on its layers),
// deletes the lease: the next server's start deletes a kept one.
func (im *image) Close(ctx context.Context, keepLease bool) {
	sandbox.UnmountImage(im.pool)
	if im.lease != "" && !keepLease {
		ctx = namespaces.WithNamespace(ctx, im.ns)
		if err := im.client.LeasesService().Delete(ctx, leases.Lease{ID: im.lease}); err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).WithError(err).Warnf("gvx pool: delete lease %s", im.lease)
		}
	}
	_ = im.client.Close()
}
