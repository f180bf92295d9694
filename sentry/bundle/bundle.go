// Package bundle reads the OCI bundle gvx-sentry is invoked on.
package bundle

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ReadSpec reads dir/config.json.
func ReadSpec(dir string) (*specs.Spec, error) {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("parse %s/config.json: %w", dir, err)
	}
	return &s, nil
}

// WritePidFile writes pid to path atomically, as a runc-compatible runtime
// does for --pid-file.
func WritePidFile(path string, pid int) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("write pid file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write pid file: %w", err)
	}
	return nil
}
