package pool

import "context"

// Image is an image pool's image (package poolimage opens one): the root
// filesystem, at Dir, of every pool sandbox's root container, with
// gvx-pause at bootspec.PauseInImage.
type Image interface {
	// Ref is the image's reference, Dir where it is mounted and Layers its
	// layer directories (adopt.Layers), topmost first.
	Ref() string
	Dir() string
	Layers() []string
	// Close unmounts it; keepLayers keeps what protects its layers from
	// garbage collection (sandboxes handed out still run on them).
	Close(ctx context.Context, keepLayers bool)
}

// ImageOpener opens cfg-style image pools: the image named by the pool's
// config, mounted at dir with the gvx-pause binary at pause (on dir's file
// system) added as bootspec.PauseInImage. The server gets one from its
// caller (`gvx pool serve`), so that the server does not link the
// containerd client unless it serves an image.
type ImageOpener func(ctx context.Context, dir, pause string) (Image, error)
