package main

import (
	"fmt"
	"os"

	"gvisor.dev/gvisor/runsc/cli"
	"gvisor.dev/gvisor/runsc/cli/maincli"
	"gvisor.dev/gvisor/runsc/cmd/util"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/checkpoint"
	"github.com/gvxrun/gvx/sentry/compat"
	"github.com/gvxrun/gvx/sentry/exectask"
	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/fastexec"
	"github.com/gvxrun/gvx/sentry/monitor"
	"github.com/gvxrun/gvx/sentry/natsandbox"
	"github.com/gvxrun/gvx/sentry/oomwatch"
	"github.com/gvxrun/gvx/sentry/subcontainer"
)

// table is what gvx-sentry does with each subcommand, for each kind of
// command line (kindOf). A kind a row leaves out, and a subcommand the
// table does not list, is runsc's own (handler runsc).
var table = map[string]map[kind]handler{
	"create": {
		kindPlain:        before(watchOOM, runsc), // in the mount namespace of its volumes (mountVolumes)
		kindSubcontainer: gvx(new(subcontainer.Create)),
		kindTask:         gvx(new(exectask.Create)),
		kindNAT:          before(watchOOM, gvx(new(natsandbox.Create))), // runsc's, then the NAT and eth0
	},
	"start": {
		kindPlain:        runsc,
		kindSubcontainer: gvx(new(subcontainer.Start)),                       // asks its monitor, on the start socket
		kindTask:         gvx(new(subcontainer.Start)),                       // the same, to the task's monitor
		kindNAT:          gvx(new(natsandbox.Start)),                         // runsc's, keeping the NAT's eth0
		kindTarget:       rewrite(targetRestore, before(targetSetup, runsc)), // its volumes mounted, runsc's restore into the created container
	},
	"kill": {
		kindPlain: gvx(new(Kill)), // runsc's, saying api.NotRunning when gone
		kindTask:  gvx(new(exectask.Kill)),
	},
	"delete": {
		kindPlain:        runsc,
		kindSubcontainer: gvx(new(subcontainer.Delete)), // runsc's unless pool-adopted or its sandbox died
		kindTask:         gvx(new(exectask.Delete)),
	},
	"exec": {
		kindPlain: gvx(new(fastexec.Exec)), // runsc's but for a detached process file
		kindTask:  onSandbox(gvx(new(fastexec.Exec))),
	},
	"checkpoint": {
		kindPlain: gvx(new(checkpoint.Checkpoint)), // runsc's save, taking runc's (CRIU's) flags
	},
	"restore": { // each bounded in time (watchRestore)
		kindPlain:        before(watchRestore, runsc),                          // in the mount namespace of its volumes (mountVolumes), like create
		kindSubcontainer: before(watchRestore, gvx(new(subcontainer.Restore))), // a warm-pool task's: create, then its monitor restores it
		kindNAT:          before(watchRestore, gvx(new(natsandbox.Restore))),   // runsc's, with a new NAT and eth0
	},
	"ps":     {kindTask: onSandbox(runsc)},
	"pause":  {kindTask: onSandbox(runsc)},
	"resume": {kindTask: onSandbox(runsc)},
	"update": {kindTask: onSandbox(runsc)},
	"state":  {kindTask: onSandbox(runsc)},
	"events": {kindTask: onSandbox(runsc)},

	subcontainer.MonitorCommand: {kindHelper: gvx(new(subcontainer.Monitor))},
	exectask.MonitorCommand:     {kindHelper: gvx(new(exectask.Monitor))},
	api.NATCommand:              {kindHelper: gvx(new(natsandbox.Serve))},
	"boot":                      {kindHelper: before(bootSetup, runsc)},  // the Sentry runs in this process
	"gofer":                     {kindHelper: before(goferSetup, runsc)}, // the sandbox's file server
}

// A kind is what a gvx-sentry command line is about.
type kind int

const (
	// kindPlain is a container gVisor runs as it is — the root container
	// of a sandbox of its own — or a command line gvx adds nothing to.
	// Where gvx does the same for a container in a running sandbox (kill,
	// exec, …), kindOf does not tell that one apart: it is plain too.
	kindPlain kind = iota
	// kindSubcontainer is a container in a running sandbox: a pod's
	// container, or one that adopted a warm-pool sandbox (package
	// subcontainer). kindOf tells it apart for create, restore, start and
	// delete.
	kindSubcontainer
	// kindTask is a task started as a process in a running sandbox's root
	// container, an image pool's sandbox (package exectask).
	kindTask
	// kindNAT is the create, restore or start of a sandbox of its own
	// with gvx's userspace NAT (package natsandbox).
	kindNAT
	// kindHelper is an internal command gvx-sentry runs itself as: a
	// monitor, gVisor's boot and gofer. (An exec's waiter is run before any
	// of this: main.)
	kindHelper
	// kindTarget is the start of a restore target the shim named a
	// checkpoint for (target.go).
	kindTarget
)

// kindOf classifies command line c for table. Each subcommand looks at no
// more than it needs: a create at its spec; a start at whether a monitor
// waits on the start socket of the container it names; every other
// subcommand at whether the container it names is a task recorded in the
// sentry root, and a delete also at gVisor's state of it.
func kindOf(c argv.Command) kind {
	switch c.Sub {
	case subcontainer.MonitorCommand, exectask.MonitorCommand, api.NATCommand, "boot", "gofer":
		return kindHelper
	case "create":
		spec, err := c.CreateSpec()
		switch {
		case err != nil:
			return kindPlain // runsc's create reports it
		case record.IsTask(spec):
			return kindTask
		case subcontainer.IsSubcontainer(spec):
			return kindSubcontainer
		case natsandbox.Wants(spec):
			return kindNAT
		}
		return kindPlain
	case "restore":
		spec, err := c.CreateSpec()
		switch {
		case err != nil:
			return kindPlain
		case subcontainer.IsSubcontainer(spec):
			return kindSubcontainer
		case natsandbox.Wants(spec):
			return kindNAT
		}
		return kindPlain
	}
	ids := c.Args()
	switch {
	case len(ids) == 0:
		return kindPlain
	case c.Sub == "start":
		switch {
		case len(ids) == 1 && isTarget(c.Root, ids[0]):
			return kindTarget
		case len(ids) == 1 && natsandbox.Has(c.Root, ids[0]):
			return kindNAT
		case len(ids) != 1 || !monitor.Has(c.Root, ids[0]):
			return kindPlain
		case record.Exists(c.Root, ids[0]):
			return kindTask
		}
		return kindSubcontainer
	case record.Exists(c.Root, ids[0]):
		return kindTask
	case c.Sub == "delete" && len(ids) == 1 && subcontainer.Exists(c.Root, ids[0]):
		return kindSubcontainer
	}
	return kindPlain
}

// A handler runs a command line.
type handler struct {
	// cmd is gvx's own subcommand for it; nil for runsc's command line.
	cmd util.SubCommand
	// rewrite, when set, gives the command line to run instead of the
	// one given (if it says so): onSandbox's has the command act on the
	// sandbox of the task it names (exectask.Rewrite).
	rewrite func(argv.Command) ([]string, bool)
	// before runs first, in the process that then runs the command.
	before func()
}

// runsc runs runsc's own command line (gVisor's, with all its commands).
var runsc = handler{}

// gvx runs gvx's subcommand c (which has the name of the row it is in).
func gvx(c util.SubCommand) handler { return handler{cmd: c} }

// onSandbox is h on the task's sandbox: the sandbox's id replaces the
// task's on the command line first.
func onSandbox(h handler) handler { return rewrite(exectask.Rewrite, h) }

// rewrite is h on the command line fn makes of the one given.
func rewrite(fn func(argv.Command) ([]string, bool), h handler) handler { h.rewrite = fn; return h }

// installCompat patches the Sentry's system calls before it boots:
// Linux's behaviour where gVisor's differs, and the guest's pids limit.
func installCompat() {
	compat.Install()
	compat.InstallPidsLimit(compat.BootPidsLimit(os.Args))
}

// watchOOM starts the OOM watcher of the sandbox a create (os.Args)
// makes (package oomwatch).
func watchOOM() {
	c, ok := argv.Parse(os.Args)
	if !ok {
		return
	}
	spec, err := c.CreateSpec()
	if err != nil {
		return
	}
	oomwatch.Spawn(spec, c.SubFlag("pid-file"))
}

// before is h with fn run first.
func before(fn func(), h handler) handler { h.before = fn; return h }

// dispatch runs command line args with its handler from table.
func dispatch(args []string) {
	h := runsc
	if c, ok := argv.Parse(args); ok {
		if kept := dropGoneLog(args, c); len(kept) != len(args) {
			args = kept
			c, _ = argv.Parse(args) // one global flag less: parses as before
		}
		if err := makeSharedRoot(c); err != nil {
			fmt.Fprintf(os.Stderr, "gvx-sentry: %v\n", err)
			os.Exit(1)
		}
		h = table[c.Sub][kindOf(c)]
		if h.rewrite != nil {
			if rewritten, ok := h.rewrite(c); ok {
				args = rewritten
			}
		}
	}
	os.Args = args
	if h.before != nil {
		h.before()
	}
	if h.cmd == nil {
		maincli.Main()
		return
	}
	cli.Run(nil, map[util.SubCommand]string{h.cmd: ""}, nil)
}
