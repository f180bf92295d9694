// Command gvx-runtime is the runc-compatible command the gvx shim runs for a
// task.
//
// It is a small front for gvx-sentry: gvx-sentry carries gVisor and takes
// ≈ 5 ms to start; gvx-runtime ≈ 1 ms. It answers the calls that need no
// gVisor code itself (the table fast) — `create` of a task started as a
// process in a running sandbox (sentry/exectask/record), `start` of a
// container or task whose monitor waits on its start socket
// (sentry/monitor), a detached `exec` in and a `kill` of a task or
// container whose monitor serves them, a `kill --all` of a container
// whose monitor marked it ended, and a `delete` of such a task, of such a
// container and of a root container whose sandbox exited — and
// replaces itself with gvx-sentry (in a new mount namespace for a
// create that mounts volumes or host binds: mntns.go),
// next to its own executable, for everything else, keeping its argument
// vector (argv[0] included: gvx-sentry reads the task's flags file beside
// it).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gvxrun/gvx/api"
)

// fast is what gvx-runtime answers itself, by subcommand: each handler
// reports whether it took the call; one that does not leaves it to
// gvx-sentry, which gets the command line as it came. (gvx-runtime's one
// other command, the waiter of a fast exec (waitCommand), is no runc call:
// main runs it before parsing anything.)
var fast = map[string]func(command) (handled bool, err error){
	"create": command.create, // a task started as a process in a running sandbox: its record and monitor
	"start":  command.start,  // a container or task whose monitor waits on its start socket
	"exec":   command.exec,   // a detached exec in a task or container whose monitor serves execs
	"kill":   command.kill,   // a started task or container (or one process of it, --pid): its monitor or the control socket signals it
	"delete": command.delete, // a task whose process has exited (or --force), a container that ended
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == waitCommand {
		os.Exit(waitMain(os.Args[2:]))
	}
	var sentry string
	self, err := os.Executable()
	if err == nil {
		sentry, err = sentryPath(self)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gvx-runtime: %v\n", err)
		os.Exit(1)
	}
	if c, ok := parse(os.Args); ok && fast[c.sub] != nil {
		c.sentry = sentry
		handled, err := fast[c.sub](c)
		if handled {
			if err != nil {
				c.fail(err)
			}
			return
		}
	}
	err = syscall.Exec(sentry, os.Args, mountNamespace(os.Args, os.Environ()))
	fmt.Fprintf(os.Stderr, "gvx-runtime: exec %s: %v\n", sentry, err)
	os.Exit(1)
}

// sentryPath is gvx-sentry (api.SentryBinary) next to executable self.
func sentryPath(self string) (string, error) {
	p := filepath.Join(filepath.Dir(self), api.SentryBinary)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s next to %s: %w (install both with `make install`)", api.SentryBinary, self, err)
	}
	return p, nil
}
