// Package checkpoint is what a gvx checkpoint holds besides gVisor's state.
//
// gVisor saves a sandbox's kernel and memory (gvx-sentry checkpoint: a
// state file and a pages file). The writable root filesystem layer lives
// in that memory when it is gvx's default in-memory overlay; everything
// else a sandbox writes lives in its ext4lite volumes (and an ext4 root
// filesystem from the ext4lite snapshotter), which the image must hold as
// they were at the instant the kernel was saved, or the restored processes
// would remember files that are not there. SaveVolumes copies them while
// the sandbox is paused — each filesystem frozen, so that what the host
// kernel still caches is on the image first — by reflink where the host
// filesystem can (XFS, btrfs), sparsely otherwise; RestoreVolume puts such
// a copy back. A Manifest in the image directory lists them, with what the
// restore must match.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/gvxrun/gvx/api"
)

// ManifestFile is the manifest's name in a checkpoint image directory.
const ManifestFile = "gvx-checkpoint.json"

// RelayFile, in the image directory of a proxied docker-mode sandbox, is
// a copy of the gvx-relay its guest ran (Manifest.Relay): a restore runs
// the relay it was saved with, even after an upgrade replaced the host's.
const RelayFile = "gvx-relay"

// volumesDir, in an image directory, holds the volumes' copies.
const volumesDir = "gvx-volumes"

// manifestVersion is the layout of this package's image directories.
const manifestVersion = 1

// Manifest describes a checkpoint image directory.
type Manifest struct {
	Version int `json:"version"`
	// Task is the id of the task that was checkpointed.
	Task string `json:"task"`
	// Flags are the gvx-sentry global flags the sandbox ran with; a
	// restore must run with the same.
	Flags string `json:"flags"`
	// Docker is docker mode.
	Docker bool `json:"docker,omitempty"`
	// Relay is the sha256 (hex) of the gvx-relay that proxied docker
	// mode runs in the guest, copied as RelayFile; "" when the sandbox
	// runs none (or was saved before gvx kept it: the host's is used).
	Relay string `json:"relay,omitempty"`
	// Volumes are the sandbox's ext4lite volumes.
	Volumes []Volume `json:"volumes,omitempty"`
	// Root is the sandbox's root container when the task ran as a
	// container in a sandbox booted before it (a warm pool's): a restore
	// boots that root container from the image first, then restores the
	// task into it. Nil when the task was the sandbox's root container.
	Root *Root `json:"root,omitempty"`
	// Files are the sizes of gVisor's image files (api.CheckpointStateFile,
	// …) when the checkpoint was taken: ReadManifest refuses an image
	// whose files are missing or of another size (cut short by a full
	// disk or an interrupted copy) before a restore starts. Absent in
	// manifests written before 2026-12-05.
	Files map[string]int64 `json:"files,omitempty"`
}

// imageFiles are gVisor's files of an image directory.
var imageFiles = []string{api.CheckpointStateFile, api.CheckpointPagesMetaFile, api.CheckpointPagesFile}

// Root is the root container of a checkpointed sandbox the task ran in.
type Root struct {
	// ID is its container id at the checkpoint.
	ID string `json:"id"`
	// Flags are the gvx-sentry global flags the sandbox booted with.
	Flags string `json:"flags"`
}

// RootSpecFile, in the image directory of a checkpoint with a Root, is
// that root container's spec.
const RootSpecFile = "gvx-root.json"

// SaveRoot copies the spec of root container id, in bundle, of a sandbox
// booted with gvx-sentry flags into image directory dir, and returns what
// the manifest records of it.
func SaveRoot(dir, bundle, id, flags string) (*Root, error) {
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("the spec of root container %s: %w", id, err)
	}
	if err := api.WriteFile(filepath.Join(dir, RootSpecFile), data, 0o600); err != nil {
		return nil, fmt.Errorf("the spec of root container %s: %w", id, err)
	}
	return &Root{ID: id, Flags: flags}, nil
}

// Volume is one volume of a checkpointed sandbox.
type Volume struct {
	// Destination is where the sandbox mounts it ("/" for an ext4 root
	// filesystem).
	Destination string `json:"destination"`
	// File is its copy, relative to the image directory; "" for a
	// read-only volume, which the sandbox cannot have changed.
	File     string `json:"file,omitempty"`
	ReadOnly bool   `json:"readonly,omitempty"`
	// Method is how the copy was made (volume.Method).
	Method string `json:"method,omitempty"`
}

// Write writes m into image directory dir.
func (m *Manifest) Write(dir string) error {
	m.Version = manifestVersion
	m.Files = nil
	for _, name := range imageFiles {
		if st, err := os.Stat(filepath.Join(dir, name)); err == nil {
			if m.Files == nil {
				m.Files = map[string]int64{}
			}
			m.Files[name] = st.Size()
		}
	}
	if err := api.WriteJSON(filepath.Join(dir, ManifestFile), m); err != nil {
		return fmt.Errorf("checkpoint manifest: %w", err)
	}
	return nil
}

// ErrNoManifest means an image directory has no gvx manifest: it was not
// made by gvx.
var ErrNoManifest = errors.New("not a gvx checkpoint (no " + ManifestFile + ")")

// ReadManifest reads the manifest of image directory dir.
func ReadManifest(dir string) (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, ErrNoManifest)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("checkpoint %s: manifest: %w", dir, err)
	}
	if m.Version != manifestVersion {
		return nil, fmt.Errorf("checkpoint %s: manifest version %d, this gvx reads %d", dir, m.Version, manifestVersion)
	}
	for _, name := range slices.Sorted(maps.Keys(m.Files)) {
		want := m.Files[name]
		st, err := os.Stat(filepath.Join(dir, name))
		switch {
		case err != nil:
			return nil, fmt.Errorf("checkpoint %s: the image is damaged: %w; take the checkpoint again", dir, err)
		case st.Size() != want:
			return nil, fmt.Errorf("checkpoint %s: the image is damaged: %s is %d bytes, %d when it was saved; take the checkpoint again", dir, name, st.Size(), want)
		}
	}
	for _, v := range m.Volumes {
		// A restore copies the file into the task's volume: a path
		// out of the image would hand the guest a host file.
		if v.File != "" && !filepath.IsLocal(v.File) {
			return nil, fmt.Errorf("checkpoint %s: manifest: the volume at %s names file %q, which is not inside the image: the image is damaged; take the checkpoint again", dir, v.Destination, v.File)
		}
	}
	return &m, nil
}

// Volume returns the manifest's volume mounted at destination.
func (m *Manifest) Volume(destination string) (Volume, bool) {
	for _, v := range m.Volumes {
		if v.Destination == destination {
			return v, true
		}
	}
	return Volume{}, false
}
