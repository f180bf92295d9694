// Package argv parses a gvx-sentry command line the way runsc does (global
// flags, subcommand, the subcommand's arguments) and re-executes gvx-sentry
// with the same global flags for gvx's helper processes.
package argv

import (
	"io"
	"os"
	"os/exec"

	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/flag"
)

// Command is a parsed gvx-sentry command line.
type Command struct {
	// Globals are the program name and the global flags.
	Globals []string
	// Sub is the subcommand and Rest its arguments.
	Sub  string
	Rest []string
	// Root is the --root global flag's value.
	Root string
}

// Parse parses args once; ok is false when args has no subcommand or its
// global flags do not parse.
func Parse(args []string) (Command, bool) {
	if len(args) == 0 {
		return Command{}, false
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	config.RegisterFlags(fs)
	// The global flags runsc's command line package registers itself
	// (runsc/cli): the boot and gofer processes get the log fds.
	for _, name := range []string{"log-fd", "debug-log-fd", "panic-log-fd", "coverage-fd"} {
		fs.Int(name, -1, "")
	}
	for _, name := range []string{"help", "h", "version"} {
		fs.Bool(name, false, "")
	}
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() == 0 {
		return Command{}, false
	}
	n := len(args) - fs.NArg()
	return Command{
		Globals: append([]string(nil), args[:n]...),
		Sub:     fs.Arg(0),
		Rest:    fs.Args()[1:],
		Root:    Flag(fs, "root"),
	}, true
}

// Self returns a command that runs gvx-sentry (this binary, under the name
// it was invoked by) with this process's global flags and then args.
func Self(args ...string) *exec.Cmd {
	c, _ := Parse(os.Args)
	globals := c.Globals
	if len(globals) == 0 {
		globals = os.Args[:1]
	}
	cmd := exec.Command("/proc/self/exe", append(append([]string(nil), globals[1:]...), args...)...)
	cmd.Args[0] = globals[0]
	return cmd
}

// Flag returns the value of flag name in f ("" if f has no such flag).
func Flag(f *flag.FlagSet, name string) string {
	if fl := f.Lookup(name); fl != nil {
		return fl.Value.String()
	}
	return ""
}
