package pool

import (
	"context"
	"os"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/core/mount"
	"golang.org/x/sys/unix"
)

// Image is an image pool's image (package poolimage opens one): the root
// filesystem, at Dir, of every pool sandbox's root container, with
// gvx-pause at PauseInImage.
type Image interface {
	// Ref is the image's reference, Dir where it is mounted and Layers its
	// layer directories (Layers), topmost first.
	Ref() string
	Dir() string
	Layers() []string
	// Close unmounts it; keepLayers keeps what protects its layers from
	// garbage collection (sandboxes handed out still run on them).
	Close(ctx context.Context, keepLayers bool)
}

// ImageOpener opens cfg-style image pools: the image named by the pool's
// config, mounted at dir with the gvx-pause binary at pause (on dir's file
// system) added as PauseInImage. The server gets one from its caller (`gvx pool serve`), so
// that this package — which the shim imports — does not depend on the
// containerd client.
type ImageOpener func(ctx context.Context, dir, pause string) (Image, error)

// ImageUpperSuffix names the directory beside an image mount that holds
// the overlay's upper and work directories.
const ImageUpperSuffix = "-rw"

// Layers returns the read-only layer directories of a root filesystem given
// as containerd mounts, topmost first: an overlay's lowerdirs (its upper
// directory is the container's own) or a read-only bind mount's source (a
// view of a one-layer image). It returns nil for anything else. Two root
// filesystems with the same layers show the same image.
func Layers(mounts []mount.Mount) []string {
	if len(mounts) != 1 {
		return nil
	}
	m := mounts[0]
	var layers []string
	switch {
	case m.Type == "overlay":
		for _, o := range m.Options {
			switch {
			case strings.HasPrefix(o, "lowerdir="):
				layers = append(layers, strings.Split(strings.TrimPrefix(o, "lowerdir="), ":")...)
			case strings.HasPrefix(o, "lowerdir+="):
				layers = append(layers, strings.TrimPrefix(o, "lowerdir+="))
			}
		}
	case m.Type == "bind" && slices.Contains(m.Options, "ro"):
		layers = []string{m.Source}
	}
	return layers
}

// UnmountImage detaches every mount at dir and removes dir and its upper
// directory.
func UnmountImage(dir string) {
	for unix.Unmount(dir, unix.MNT_DETACH) == nil {
	}
	_ = os.Remove(dir)
	_ = os.RemoveAll(dir + ImageUpperSuffix)
}
