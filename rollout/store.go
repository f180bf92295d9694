package rollout

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/gvxrun/gvx/api"
)

// Handle is one checkpoint in a Store.
type Handle struct {
	// ID names it ("ck-" and hex).
	ID string `json:"id"`
	// Parent is the checkpoint the saved state descends from (the
	// sandbox's previous checkpoint, or the one it was rolled back or
	// forked to); "" for a sandbox's first.
	Parent string `json:"parent,omitempty"`
	// Lineage is the tree the handle belongs to: the id of the sandbox
	// its tree started with. A sandbox rolls back only to handles of its
	// own lineage; forks stay in their handle's.
	Lineage string `json:"lineage"`
	// Sandbox is the sandbox that was checkpointed.
	Sandbox string `json:"sandbox"`
	// Image and Snapshotter are what its root filesystem was made of.
	Image       string `json:"image"`
	Snapshotter string `json:"snapshotter"`
	// Runtime is the runtime the sandbox ran with: its restores run with
	// the same (the gvx-sentry flags a restore needs follow from it).
	Runtime *Runtime `json:"runtime,omitempty"`
	// Labels are the checkpointed container's labels (the engine's own
	// left out): a fork's backing gets those Options.ForkLabel keeps.
	Labels  map[string]string `json:"labels,omitempty"`
	Created time.Time         `json:"created"`
	// Timings of its making.
	Paused time.Duration `json:"paused"`
}

// Runtime is a containerd runtime and its options (a protobuf Any).
type Runtime struct {
	Name        string `json:"name"`
	OptionsType string `json:"optionsType,omitempty"`
	Options     []byte `json:"options,omitempty"`
}

// Store keeps checkpoints (and the volumes of the sandboxes restored from
// them) under one directory. On XFS or btrfs, volume copies are reflinks:
// they cost the blocks written since.
type Store struct {
	dir string
}

// OpenStore opens (creating it) the store at dir.
func OpenStore(dir string) (*Store, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("checkpoint store %q: must be an absolute path", dir)
	}
	for _, d := range []string{dir, filepath.Join(dir, "handles"), filepath.Join(dir, "volumes")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("checkpoint store: %w", err)
		}
	}
	return &Store{dir: dir}, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// ErrUnknownHandle means a handle is not in the store: never made here,
// or released.
var ErrUnknownHandle = errors.New("no such checkpoint")

func (s *Store) handleDir(id string) string { return filepath.Join(s.dir, "handles", id) }

// ImageDir is where handle id's checkpoint image is.
func (s *Store) ImageDir(id string) string { return filepath.Join(s.handleDir(id), "image") }

// specFile, in a handle's directory, is the checkpointed container's spec.
const specFile = "spec.json"

// newHandle makes the directory of a new handle and returns it.
func (s *Store) newHandle(h Handle) (*Handle, error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	h.ID = "ck-" + hex.EncodeToString(rnd[:])
	h.Created = time.Now()
	if err := os.MkdirAll(s.ImageDir(h.ID), 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint store: %w", err)
	}
	return &h, nil
}

// save records h (it is listed from then on).
func (s *Store) save(h *Handle) error {
	return api.WriteJSON(filepath.Join(s.handleDir(h.ID), "handle.json"), h)
}

// Get returns handle id.
func (s *Store) Get(id string) (*Handle, error) {
	if id == "" || strings.ContainsAny(id, "/.") {
		return nil, fmt.Errorf("checkpoint %q: %w", id, ErrUnknownHandle)
	}
	data, err := os.ReadFile(filepath.Join(s.handleDir(id), "handle.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint %s: %w (released, or made by another store than %s)", id, ErrUnknownHandle, s.dir)
	}
	if err != nil {
		return nil, err
	}
	var h Handle
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	return &h, nil
}

// List returns every handle, oldest first.
func (s *Store) List() ([]*Handle, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "handles"))
	if err != nil {
		return nil, err
	}
	var out []*Handle
	for _, e := range entries {
		if h, err := s.Get(e.Name()); err == nil {
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// remove deletes handle id's files.
func (s *Store) remove(id string) error {
	if err := os.RemoveAll(s.handleDir(id)); err != nil {
		return fmt.Errorf("release checkpoint %s: %w", id, err)
	}
	return nil
}

// Bytes is the disk space handle id takes (allocated blocks, so shared
// reflinked blocks count in each handle that has them).
func (s *Store) Bytes(id string) int64 {
	var n int64
	_ = filepath.Walk(s.handleDir(id), func(_ string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// volumeDir is where the volumes of the engine's sandbox backing id live.
func (s *Store) volumeDir(id string) string { return filepath.Join(s.dir, "volumes", id) }
