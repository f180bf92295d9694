// Package argv splits a gvx-sentry command line the way runsc parses it:
// global flags, subcommand, the subcommand's arguments.
package argv

import (
	"io"

	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/flag"
)

// Split returns argv's program name and global flags, its subcommand and
// the subcommand's arguments; ok is false when argv has no subcommand or
// its global flags do not parse.
func Split(argv []string) (globals []string, sub string, rest []string, ok bool) {
	if len(argv) == 0 {
		return nil, "", nil, false
	}
	fs := flag.NewFlagSet(argv[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	config.RegisterFlags(fs)
	if err := fs.Parse(argv[1:]); err != nil || fs.NArg() == 0 {
		return nil, "", nil, false
	}
	n := len(argv) - fs.NArg()
	return append([]string(nil), argv[:n]...), fs.Arg(0), fs.Args()[1:], true
}

// Global returns the value of global flag name in argv ("" if unset).
func Global(argv []string, name string) string {
	if len(argv) == 0 {
		return ""
	}
	fs := flag.NewFlagSet(argv[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	config.RegisterFlags(fs)
	_ = fs.Parse(argv[1:])
	if fl := fs.Lookup(name); fl != nil {
		return fl.Value.String()
	}
	return ""
}

// Flag returns the value of flag name in f ("" if f has no such flag).
func Flag(f *flag.FlagSet, name string) string {
	if fl := f.Lookup(name); fl != nil {
		return fl.Value.String()
	}
	return ""
}
