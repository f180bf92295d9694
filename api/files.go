package api

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// SpecFile is the OCI spec's file name in a bundle.
const SpecFile = "config.json"

// ReadSpec decodes bundle dir's spec into v (each module brings its own
// runtime-spec version's Spec type, or a struct of the fields it needs).
func ReadSpec(dir string, v any) error {
	p := filepath.Join(dir, SpecFile)
	data, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("read OCI spec: %w", err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("invalid OCI spec %s: %w", p, err)
	}
	return nil
}

// WriteFile replaces path with data atomically (a temporary file beside
// it, then a rename), so that a reader, or a crash, never sees half of it.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// WriteJSON writes v as JSON to path atomically (WriteFile, mode 0600).
func WriteJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return WriteFile(path, data, 0o600)
}
