package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/volume"
)

// VolumeMount reports whether m is an ext4lite volume — a mount of type
// ext4, or a bind mount whose source is an ext4 image file — and whether
// it is read-only.
func VolumeMount(ctx context.Context, m specs.Mount) (isVolume, readOnly bool, err error) {
	readOnly = slices.Contains(m.Options, "ro")
	switch {
	case m.Type == "ext4":
		if !filepath.IsAbs(m.Source) {
			return false, false, fmt.Errorf("volume for %s: source %q must be an absolute path to an ext4 image", m.Destination, m.Source)
		}
		return true, readOnly, nil
	case IsBind(m):
		st, err := os.Stat(m.Source)
		if err != nil || !st.Mode().IsRegular() {
			return false, false, nil // directories, devices, missing: gVisor's business
		}
		if _, err := volume.Inspect(ctx, m.Source); err != nil {
			if errors.Is(err, volume.ErrNotExt4) || errors.Is(err, volume.ErrTruncated) && st.Size() < 2048 {
				return false, false, nil // an ordinary file bind mount
			}
			return false, false, fmt.Errorf("volume for %s: %w", m.Destination, err)
		}
		return true, readOnly, nil
	}
	return false, false, nil
}
