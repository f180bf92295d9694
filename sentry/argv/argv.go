// Package argv parses gvx-sentry command lines the way runsc does.
//
// A command line is the program name and its global flags, the subcommand
// and the subcommand's arguments (Parse); the container id a subcommand
// names is found with the flags of runsc's command of that name (Args,
// Retarget). Self re-executes gvx-sentry with the same global flags for
// gvx's helper processes.
package argv

import (
	"fmt"
	"io"
	"os"
	"os/exec"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/cmd"

	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/sentry/bundle"
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
	// SharedRoot is the --shared-root global flag's value: gVisor's state
	// shared across sandboxes (its gofers' pinned empty network
	// namespace); "" when unset.
	SharedRoot string
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
		Globals:    append([]string(nil), args[:n]...),
		Sub:        fs.Arg(0),
		Rest:       fs.Args()[1:],
		Root:       Flag(fs, "root"),
		SharedRoot: Flag(fs, "shared-root"),
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

// SubFlags parses c's subcommand arguments with the flags sc defines, as
// runsc does; nil if they do not parse.
func (c Command) SubFlags(sc interface{ SetFlags(*flag.FlagSet) }) *flag.FlagSet {
	f := flag.NewFlagSet(c.Sub, flag.ContinueOnError)
	f.SetOutput(io.Discard)
	sc.SetFlags(f)
	if err := f.Parse(c.Rest); err != nil {
		return nil
	}
	return f
}

// runscCommand returns runsc's command sub, for its flags, if it is one of
// runsc's OCI commands that name a container (first among their positional
// arguments); nil otherwise.
func runscCommand(sub string) interface{ SetFlags(*flag.FlagSet) } {
	switch sub {
	case "checkpoint":
		return new(cmd.Checkpoint)
	case "create":
		return new(cmd.Create)
	case "delete":
		return new(cmd.Delete)
	case "events":
		return new(cmd.Events)
	case "exec":
		return new(cmd.Exec)
	case "kill":
		return new(cmd.Kill)
	case "pause":
		return new(cmd.Pause)
	case "ps":
		return new(cmd.PS)
	case "restore":
		return new(cmd.Restore)
	case "resume":
		return new(cmd.Resume)
	case "run":
		return new(cmd.Run)
	case "start":
		return new(cmd.Start)
	case "state":
		return new(cmd.State)
	case "update":
		return new(cmd.Update)
	case "wait":
		return new(cmd.Wait)
	}
	return nil
}

// Args returns the positional arguments of c's subcommand, the container
// id first, parsed with the flags runsc's command of that name defines;
// nil if the subcommand is not one of runsc's that name a container or its
// arguments do not parse.
func (c Command) Args() []string {
	sc := runscCommand(c.Sub)
	if sc == nil {
		return nil
	}
	if f := c.SubFlags(sc); f != nil {
		return f.Args()
	}
	return nil
}

// Retarget returns c's command line with id in place of the container id
// it names (Args); nil if it names none.
func (c Command) Retarget(id string) []string {
	args := c.Args()
	if len(args) == 0 {
		return nil
	}
	rest := append([]string(nil), c.Rest...)
	rest[len(rest)-len(args)] = id
	return append(append(append([]string(nil), c.Globals...), c.Sub), rest...)
}

// CreateSpec reads the spec of the bundle that create (or restore: a
// create from a checkpoint) command line c names (its --bundle, else the
// working directory).
func (c Command) CreateSpec() (*specs.Spec, error) {
	if c.Sub != "create" && c.Sub != "restore" {
		return nil, fmt.Errorf("not a create: %s", c.Sub)
	}
	f := c.SubFlags(runscCommand(c.Sub))
	if f == nil {
		return nil, fmt.Errorf("create: bad arguments %q", c.Rest)
	}
	return bundle.ReadSpec(bundle.Dir(Flag(f, "bundle")))
}

// SubFlag is the value of flag name of c's subcommand (one of runsc's OCI
// commands), "" if unset or c does not parse.
func (c Command) SubFlag(name string) string {
	sc := runscCommand(c.Sub)
	if sc == nil {
		return ""
	}
	if f := c.SubFlags(sc); f != nil {
		return Flag(f, name)
	}
	return ""
}
