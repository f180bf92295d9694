package shim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/checkpoint"
	"github.com/gvxrun/gvx/oci"
	"github.com/gvxrun/gvx/volume"
)

// taskVolumes are the ext4lite volumes of one task: their leases (held
// while the task exists, so no other sandbox can use an image at the same
// time) and their staging directory.
type taskVolumes struct {
	leases []*volume.Lease
}

// release drops the leases. (The staging directories are task state
// directories, removed with the others; on the host they are empty: the
// images are mounted only inside the sandbox's private mount namespace.)
func (v *taskVolumes) release(ctx context.Context) {
	if v == nil {
		return
	}
	for _, l := range v.leases {
		if err := l.Release(); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx shim: release volume %s", l.Path())
		}
	}
	v.leases = nil
}

// lease leases (and so checks) image, the volume staged at staging for
// destination, keeping the lease in v: it returns what gvx-sentry mounts
// (the leased descriptor) and what a checkpoint copies.
func (v *taskVolumes) lease(ctx context.Context, image, staging, destination string, ro bool) (api.Volume, checkpoint.Mounted, error) {
	l, err := volume.Acquire(ctx, image, volume.AcquireOptions{})
	if err != nil {
		return api.Volume{}, checkpoint.Mounted{}, fmt.Errorf("volume for %s: %w", destination, err)
	}
	v.leases = append(v.leases, l)
	return api.Volume{Image: l.Path(), Open: l.OpenPath(), Staging: staging, ReadOnly: ro},
		checkpoint.Mounted{Image: l.Path(), Destination: destination, ReadOnly: ro}, nil
}

// prepareVolumes finds the spec's ext4lite volumes — mounts of type ext4,
// and bind mounts whose source is an ext4 image file — leases each image,
// and rewrites the mount into a bind mount of a staging directory below
// dir (made with mkdir) that gvx-sentry mounts the image on inside the
// sandbox's mount namespace; root, if set, is an ext4 root filesystem to
// mount the same way. A task restored from a checkpoint first has each
// image put back as the checkpoint holds it (restore, if set, is called
// with each volume's destination and image). It returns the leases (nil
// when the task leases no volume) and every volume mounted. With later
// set (a restore target's, whose images the checkpoint it will be named
// fills in), the volumes are staged but neither leased nor listed for
// gvx-sentry: each is appended to *later with its destination instead.
func prepareVolumes(ctx context.Context, s *specs.Spec, dir string, mkdir func(string) error, root *api.Volume,
	restore func(destination, image string) error, later *[]api.Volume) (_ *taskVolumes, mounted []checkpoint.Mounted, retErr error) {
	// The annotation is gvx's own: gvx-sentry mounts what it lists on the
	// host's kernel, so only images this function leased and checked may
	// be in it.
	if v, ok := s.Annotations[api.AnnotationVolumes]; ok {
		return nil, nil, fmt.Errorf("invalid OCI spec: annotation %s=%q is set by gvx itself; give volumes as mounts of type ext4 (or bind mounts of an ext4 image), which gvx checks before mounting", api.AnnotationVolumes, v)
	}
	tv := &taskVolumes{}
	defer func() {
		if retErr != nil {
			tv.release(ctx)
		}
	}()
	var list []api.Volume
	if root != nil {
		if restore != nil {
			if err := restore("/", root.Image); err != nil {
				return nil, nil, err
			}
		}
		// The snapshotter's image was built from untrusted layers (and
		// may have been left by an earlier container): it gets a volume's
		// checks and lease before the host kernel mounts it.
		lease, err := volume.Acquire(ctx, root.Image, volume.AcquireOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("root filesystem: %w", err)
		}
		tv.leases = append(tv.leases, lease)
		rv := *root
		rv.Open = lease.OpenPath()
		list = append(list, rv)
		mounted = append(mounted, checkpoint.Mounted{Image: root.Image, Destination: "/", ReadOnly: root.ReadOnly})
	}
	n := 0
	for i, m := range s.Mounts {
		isVol, ro, err := oci.VolumeMount(ctx, m)
		if err != nil {
			return nil, nil, err
		}
		if !isVol {
			continue
		}
		if later != nil && ro {
			return nil, nil, fmt.Errorf("volume for %s: %w", m.Destination, errTargetReadOnly)
		}
		if restore != nil && !ro {
			if err := restore(m.Destination, m.Source); err != nil {
				return nil, nil, err
			}
		}
		if n == 0 {
			if err := mkdir(dir); err != nil {
				return nil, nil, fmt.Errorf("volume staging dir: %w", err)
			}
		}
		staging := filepath.Join(dir, strconv.Itoa(n))
		n++
		if err := os.MkdirAll(staging, 0o711); err != nil {
			return nil, nil, fmt.Errorf("volume staging dir: %w", err)
		}
		opts := []string{"rbind", "rw"}
		if ro {
			opts = []string{"rbind", "ro"}
		}
		s.Mounts[i] = specs.Mount{Destination: m.Destination, Type: "bind", Source: staging, Options: opts}
		if later != nil {
			*later = append(*later, api.Volume{Image: m.Source, Staging: staging, Destination: m.Destination})
			continue
		}
		vol, mnt, err := tv.lease(ctx, m.Source, staging, m.Destination, ro)
		if err != nil {
			return nil, nil, err
		}
		list = append(list, vol)
		mounted = append(mounted, mnt)
	}
	if len(list) == 0 {
		return nil, nil, nil
	}
	if err := setVolumes(s, list); err != nil {
		return nil, nil, err
	}
	return tv, mounted, nil
}

// errTargetReadOnly refuses a read-only volume in a restore target.
var errTargetReadOnly = errors.New("a restore target's volumes are the checkpoint's copies, and a read-only volume is not copied (restore such a sandbox on demand)")

// setVolumes lists vols in the spec for gvx-sentry to mount.
func setVolumes(s *specs.Spec, vols []api.Volume) error {
	v, err := api.EncodeVolumes(vols)
	if err != nil {
		return err
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[api.AnnotationVolumes] = v
	return nil
}

// ext4Rootfs recognises a root filesystem that is one ext4 image attached
// by loop (what the ext4lite snapshotter returns). gvx does not mount it on
// the host: like a volume, gvx-sentry mounts it at target inside the
// sandbox's private mount namespace.
func ext4Rootfs(rootfs []mount.Mount, target string) *api.Volume {
	if len(rootfs) != 1 || rootfs[0].Type != "ext4" || !slices.Contains(rootfs[0].Options, "loop") || !filepath.IsAbs(rootfs[0].Source) {
		return nil
	}
	return &api.Volume{Image: rootfs[0].Source, Staging: target, ReadOnly: slices.Contains(rootfs[0].Options, "ro")}
}
