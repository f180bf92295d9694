// Command gvx-runtime is the runc-compatible command the gvx shim runs for
// a task: a small front for gvx-sentry. gvx-sentry carries gVisor and takes
// ≈ 5 ms to start; gvx-runtime ≈ 1 ms. It answers the calls that need no
// gVisor code itself — `create` of a task started as a process in a running
// sandbox (sentry/exectask/record) and `start` of a task whose monitor
// waits on its start socket (sentry/monitor) — and replaces itself with
// gvx-sentry, next to its own executable, for everything else, keeping its
// argument vector (argv[0] included: gvx-sentry reads the task's flags file
// beside it).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/monitor"
)

func main() {
	sentry, err := sentryPath()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gvx-runtime: %v\n", err)
		os.Exit(1)
	}
	c, ok := parse(os.Args)
	if ok {
		handled, err := c.run(sentry)
		if handled {
			if err != nil {
				c.fail(err)
			}
			return
		}
	}
	err = syscall.Exec(sentry, os.Args, os.Environ())
	fmt.Fprintf(os.Stderr, "gvx-runtime: exec %s: %v\n", sentry, err)
	os.Exit(1)
}

// sentryPath is gvx-sentry next to this executable.
func sentryPath() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(self), "gvx-sentry")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("gvx-sentry next to %s: %w (install both with `make install`)", self, err)
	}
	return p, nil
}

// command is a parsed command line: global flags, subcommand and its
// arguments.
type command struct {
	globals []string // argv[0] and the global flags
	root    string
	log     string
	sub     string
	args    []string
}

// valued are the global flags containerd's runc shim (go-runc) passes with
// a separate value; boolFlags those it passes alone. Anything else makes
// gvx-runtime hand the call to gvx-sentry untouched.
var (
	valued    = map[string]bool{"--root": true, "--log": true, "--log-format": true}
	boolFlags = map[string]bool{"--debug": true, "--systemd-cgroup": true}
)

func parse(argv []string) (command, bool) {
	c := command{globals: argv[:1]}
	i := 1
	for ; i < len(argv) && strings.HasPrefix(argv[i], "-"); i++ {
		a := argv[i]
		name, value, hasValue := strings.Cut(a, "=")
		name = "--" + strings.TrimLeft(name, "-")
		switch {
		case hasValue:
		case valued[name] && i+1 < len(argv):
			i++
			value = argv[i]
			c.globals = append(c.globals, a)
			a = argv[i]
		case boolFlags[name]:
		default:
			return c, false
		}
		c.globals = append(c.globals, a)
		switch name {
		case "--root":
			c.root = value
		case "--log":
			c.log = value
		}
	}
	if i >= len(argv) || c.root == "" {
		return c, false
	}
	c.sub, c.args = argv[i], argv[i+1:]
	return c, true
}

// run handles c if it is one of the fast calls; handled is false otherwise.
func (c command) run(sentry string) (handled bool, err error) {
	switch c.sub {
	case "start":
		if len(c.args) != 1 || !monitor.Has(c.root, c.args[0]) {
			return false, nil
		}
		return true, monitor.RequestStart(c.root, c.args[0])
	case "create":
		return c.create(sentry)
	}
	return false, nil
}

// create handles `create --bundle B --pid-file P <id>` of a task started
// as a process in a running sandbox.
func (c command) create(sentry string) (bool, error) {
	var dir, pidFile, id string
	for i := 0; i < len(c.args); i++ {
		a := c.args[i]
		name, value, hasValue := strings.Cut(a, "=")
		switch name = "--" + strings.TrimLeft(name, "-"); {
		case !strings.HasPrefix(a, "-"):
			if id != "" {
				return false, nil
			}
			id = a
			continue
		case name == "--no-pivot" || name == "--no-new-keyring":
			continue
		case name != "--bundle" && name != "--pid-file" && name != "--b":
			return false, nil // a console socket, preserved fds, …
		case !hasValue:
			if i+1 >= len(c.args) {
				return false, nil
			}
			i++
			value = c.args[i]
		}
		if name == "--pid-file" {
			pidFile = value
		} else {
			dir = value
		}
	}
	if id == "" || pidFile == "" {
		return false, nil
	}
	if dir == "" {
		dir, _ = os.Getwd()
	}
	spec, err := bundle.ReadSpec(dir)
	if err != nil || !record.IsTask(spec) || spec.Process == nil || spec.Process.Terminal {
		return false, nil
	}
	m := exec.Command(sentry, append(append([]string(nil), c.globals[1:]...), record.MonitorCommand, id)...)
	m.Args[0] = c.globals[0]
	m.Stdin, m.Stdout, m.Stderr = os.Stdin, os.Stdout, os.Stderr
	return true, record.Create(c.root, id, dir, spec, m, pidFile)
}

// fail reports err the way runsc does — a JSON line in the --log file,
// which containerd's runc shim quotes in its error — and on stderr, and
// exits 1.
func (c command) fail(err error) {
	msg := fmt.Sprintf("%s: %v", c.sub, err)
	fmt.Fprintf(os.Stderr, "gvx-runtime: %s\n", msg)
	if c.log != "" {
		if f, ferr := os.OpenFile(c.log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); ferr == nil {
			line, _ := json.Marshal(map[string]string{"level": "error", "msg": msg, "time": time.Now().Format(time.RFC3339)})
			_, _ = f.Write(append(line, '\n'))
			f.Close()
		}
	}
	os.Exit(1)
}
