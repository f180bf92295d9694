// Package launcher merges the shim's global flags into gvx-sentry's command
// line.
//
// It is the small amount of logic gvx-sentry adds in front of gVisor's
// runsc command line: the flags come from the api.FlagsEnv variable, else
// from the task's api.FlagsFile, and go right after the program name.
package launcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gvxrun/gvx/api"
)

// Flags returns the global flags for an invocation as argv0: the value of
// the api.FlagsEnv environment variable if set, else the api.FlagsFile next
// to argv0 (absolute paths only), else none.
func Flags(argv0 string) (string, error) {
	env := os.Getenv(api.FlagsEnv)
	if strings.TrimSpace(env) != "" || !filepath.IsAbs(argv0) {
		return env, nil
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(argv0), api.FlagsFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the task's gvx-sentry flags: %w", err)
	}
	return string(data), nil
}

// Args returns argv with the global flags from env inserted right after the
// program name, so that flags given explicitly on the command line (which
// come later) win. Each flag must start with "--"; anything else is refused
// because it would be taken for a subcommand.
func Args(argv []string, env string) ([]string, error) {
	fields := strings.Fields(env)
	if len(fields) == 0 || len(argv) == 0 {
		return argv, nil
	}
	for _, f := range fields {
		if !strings.HasPrefix(f, "--") || len(f) == 2 {
			return nil, fmt.Errorf("%s: %q is not a --flag[=value]; fix the gvx config's sentry flags", api.FlagsEnv, f)
		}
	}
	out := make([]string, 0, len(argv)+len(fields))
	out = append(out, argv[0])
	out = append(out, fields...)
	return append(out, argv[1:]...), nil
}
