// Package bundle reads the OCI bundle gvx-sentry is invoked on.
package bundle

import (
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
)

// ReadSpec reads the spec of bundle dir (api.ReadSpec into gVisor's
// runtime-spec version of the Spec type).
func ReadSpec(dir string) (*specs.Spec, error) {
	var s specs.Spec
	if err := api.ReadSpec(dir, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// WritePidFile writes pid to path atomically, as a runc-compatible runtime
// does for --pid-file.
func WritePidFile(path string, pid int) error {
	return api.WriteFile(path, []byte(strconv.Itoa(pid)), 0o644)
}
