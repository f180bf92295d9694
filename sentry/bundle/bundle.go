// Package bundle reads the OCI bundle gvx-sentry is invoked on.
package bundle

import (
	"os"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
)

// Dir is the bundle directory of a create or run whose --bundle flag is
// flag: flag, or the working directory if it is empty (runc's default).
func Dir(flag string) string {
	if flag != "" {
		return flag
	}
	wd, _ := os.Getwd()
	return wd
}

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

// WriteExecPidFiles writes a detached exec's pid files: its guest pid
// beside pidFile (api.ExecGuestPidSuffix), where the shim finds the
// process to signal inside the sandbox, then pidFile, the host process
// that stands for it. The guest pid goes first: the shim may read it as
// soon as pidFile is there.
func WriteExecPidFiles(pidFile string, guest int32, host int) error {
	if err := WritePidFile(pidFile+api.ExecGuestPidSuffix, int(guest)); err != nil {
		return err
	}
	return WritePidFile(pidFile, host)
}
