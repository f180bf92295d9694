package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// command is a parsed command line: global flags, subcommand and its
// arguments.
type command struct {
	globals []string // argv[0] and the global flags
	root    string
	log     string
	sub     string
	args    []string
	sentry  string // gvx-sentry's path (main sets it)
}

// valued are the global flags containerd's runc shim (go-runc) passes with
// a separate value; boolFlags those it passes alone. Anything else makes
// gvx-runtime hand the call to gvx-sentry untouched.
var (
	valued = map[string]bool{"--root": true, "--log": true, "--log-format": true}
	// --oci-seccomp and --allow-suid are among the flags every gvx-sentry
	// call gets (config.SentryFlagList); they act at the sandbox's boot,
	// which gvx-runtime never does.
	boolFlags = map[string]bool{"--debug": true, "--systemd-cgroup": true, "--oci-seccomp": true, "--allow-suid": true}
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

// subArgs parses a subcommand's arguments the way runsc's flag package
// does (-name or --name, a value after = or as the next argument): flags
// in valued take a value, flags in bools none (or =true/=false); both map
// a flag to the key it is returned under ("" to ignore it). Any other flag
// makes ok false: gvx-runtime then leaves the call to gvx-sentry.
func subArgs(args []string, valued, bools map[string]string) (flags map[string]string, positional []string, ok bool) {
	flags = map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			positional = append(positional, a)
			continue
		}
		name, value, hasValue := strings.Cut(a, "=")
		name = "--" + strings.TrimLeft(name, "-")
		if key, isBool := bools[name]; isBool {
			if !hasValue {
				value = "true"
			}
			if key != "" {
				flags[key] = value
			}
			continue
		}
		key, isValued := valued[name]
		if !isValued {
			return nil, nil, false
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil, nil, false
			}
			i++
			value = args[i]
		}
		flags[key] = value
	}
	return flags, positional, true
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
