package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gvxrun/gvx/sentry/argv"
)

// dropGoneLog removes the --log global flag from args when the directory
// of its file no longer exists. containerd's runc shim code passes
// `--log <bundle>/log.json`, and gVisor creates a missing log directory
// (0755) before it opens the file; a gvx-sentry process that starts after
// containerd removed the task's bundle — runsc's detached exec re-running
// itself as the exec's waiter, when the shim died right after the create —
// would make the bundle directory again, with an empty log.json in it, and
// leave it in containerd's state for good. Without the flag it logs to
// its standard error, as with no --log.
// c is args parsed.
func dropGoneLog(args []string, c argv.Command) []string {
	globals := len(c.Globals) // args[:globals] are the program and its global flags
	for i := 1; i < globals; i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			continue // a flag's value
		}
		name, value, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "log" {
			continue
		}
		n := 1
		if !inline {
			if i+1 >= globals {
				return args
			}
			value, n = args[i+1], 2
		}
		if value == "" {
			return args
		}
		if _, err := os.Stat(filepath.Dir(value)); !errors.Is(err, fs.ErrNotExist) {
			return args
		}
		return append(append([]string(nil), args[:i]...), args[i+n:]...)
	}
	return args
}
