// Command gvx-sentry is gvx's sandbox launcher, a runc-compatible runsc.
//
// It is gVisor's runsc command line (OCI create/start/exec/kill/delete/
// state/…, plus the internal gofer and boot subcommands it re-executes
// itself for) with gvx's defaults applied.
//
// gvx additions (the createRuntime hook is the separate gvx-hook): ext4lite
// volumes mounted in a private mount namespace before gVisor's create
// (volmount), containers created in a running sandbox with a runc-style
// init process (subcontainer: pod containers, warm-pool adoption), tasks
// started as a process in a running sandbox's root container (exectask:
// image pools), a detached exec that does not pay for two runtime
// start-ups in a row (fastexec), and a kill that says runc's
// api.NotRunning when what it signals is gone (kill.go).
//
// What runs a command line — one of gvx's commands, or runsc's own — is
// one table, by subcommand and kind of task (dispatch.go: table, kindOf).
//
// The containerd shim execs gvx-sentry exactly as it would exec runc.
// Global flags the shim wants for every call of a task sit in a file next
// to the task's link to gvx-sentry (api.FlagsFile), or arrive in the
// environment (api.FlagsEnv), so that the runc-compatible argument vector
// stays untouched.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/version"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/fastexec"
	"github.com/gvxrun/gvx/sentry/hostbind"
	"github.com/gvxrun/gvx/sentry/launcher"
	"github.com/gvxrun/gvx/sentry/maskpaths"
	"github.com/gvxrun/gvx/sentry/oomwatch"
	"github.com/gvxrun/gvx/sentry/sysclass"
	"github.com/gvxrun/gvx/sentry/volmount"
)

// version.Version is set by the linker; referencing it keeps it linked.
var _ = version.Version()

func main() {
	if len(os.Args) > 1 && os.Args[1] == fastexec.WaitCommand {
		os.Exit(fastexec.WaitMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == oomwatch.WatchCommand {
		if err := oomwatch.Watch(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "gvx-sentry: %v\n", err)
			os.Exit(2)
		}
		return
	}
	if err := mountVolumes(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "gvx-sentry: %v\n", err)
		os.Exit(1)
	}
	if err := rewriteSpec(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "gvx-sentry: %v\n", err)
		os.Exit(1)
	}
	flags, err := launcher.Flags(os.Args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "gvx-sentry: %v\n", err)
		os.Exit(2)
	}
	args, err := launcher.Args(os.Args, flags)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gvx-sentry: %v\n", err)
		os.Exit(2)
	}
	dispatch(args)
}

// makeSharedRoot creates the --shared-root directory (root's only) for a
// create or restore, where gVisor pins the empty network namespace its
// gofers share: the first gofer's namespace, which every later gofer
// joins instead of creating one of its own (gvx gives every task a sentry
// root of its own, so without the flag each gofer got a new namespace and
// a bind mount). gVisor only warns, and creates a namespace per gofer,
// when it cannot pin one there.
func makeSharedRoot(c argv.Command) error {
	if c.SharedRoot == "" || (c.Sub != "create" && c.Sub != "restore" && c.Sub != "run") {
		return nil
	}
	if err := os.MkdirAll(c.SharedRoot, 0o700); err != nil {
		return fmt.Errorf("create the shared root %s: %w", c.SharedRoot, err)
	}
	return nil
}

// mountVolumes handles a create/run of a sandbox with ext4lite volumes or
// host bind mounts to clone (package hostbind): the first call
// re-executes gvx-sentry in a private mount namespace (and does not
// return); the re-executed one mounts the volumes and the clones there,
// points the spec at them and returns, so that gVisor's create runs inside
// that namespace.
func mountVolumes(argv []string) error {
	dir, ok := volmount.CreateBundle(argv)
	if !ok {
		return nil
	}
	spec, err := bundle.ReadSpec(dir)
	if err != nil {
		return nil // gVisor reports a bad bundle itself
	}
	vols, err := volmount.FromSpec(spec)
	if err != nil {
		return err
	}
	skip := make([]string, 0, len(vols))
	for _, v := range vols {
		skip = append(skip, v.Staging)
	}
	task, err := taskDir(argv, dir)
	if err != nil {
		return err
	}
	before := slices.Clone(spec.Mounts)
	binds, err := hostbind.Plan(spec, hostbind.Dir(task), skip)
	if err != nil {
		return err
	}
	if len(vols) == 0 && len(binds) == 0 {
		if volmount.InPrivateNamespace() {
			// Started in one it turned out not to need (a host bind's
			// source changed since gvx-runtime looked): receive the
			// host's mount events all the same.
			if err := volmount.Prepare(nil, nil); err != nil {
				return err
			}
		}
		if reflect.DeepEqual(before, spec.Mounts) {
			return nil
		}
		return writeSpec(dir, spec) // a read-only rbind's submounts listed
	}
	if !volmount.InPrivateNamespace() {
		return volmount.Reexec(argv)
	}
	var uids, gids []specs.LinuxIDMapping
	if spec.Linux != nil {
		uids, gids = spec.Linux.UIDMappings, spec.Linux.GIDMappings
	}
	userns, err := volmount.UserNS(uids, gids)
	if err != nil {
		return err
	}
	if userns != nil {
		defer userns.Close()
	}
	if err := volmount.Prepare(vols, userns); err != nil {
		return err
	}
	if len(binds) == 0 && reflect.DeepEqual(before, spec.Mounts) {
		return nil
	}
	if err := hostbind.Apply(spec, binds, userns); err != nil {
		return err
	}
	return writeSpec(dir, spec)
}

// taskDir is the shim's task directory (traverse-only, beside the task's
// flags), else the bundle's (a pool's sandbox): reachable by the
// sandbox's unprivileged gofer, and removed with the task.
func taskDir(argv []string, bundleDir string) (string, error) {
	task, err := filepath.Abs(filepath.Dir(argv[0]))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(task, api.FlagsFile)); err != nil {
		return bundleDir, nil
	}
	return task, nil
}

// writeSpec writes spec back to the bundle for gVisor.
func writeSpec(dir string, spec *specs.Spec) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return api.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
}

// rewriteSpec makes gVisor apply what a create's (run's, restore's) spec
// asks and gVisor would not: masked and read-only paths as mounts
// (package maskpaths, with api.MaskedFile as the empty file masked files
// show) and a /sys/class with a net/ (package sysclass, api.SysClassDir).
// It writes the spec back to the bundle for gVisor.
func rewriteSpec(argv []string) error {
	dir, ok := volmount.CreateBundle(argv)
	if !ok {
		return nil
	}
	spec, err := bundle.ReadSpec(dir)
	if err != nil {
		return nil // gVisor reports a bad bundle itself
	}
	task, err := taskDir(argv, dir)
	if err != nil {
		return err
	}
	empty := filepath.Join(task, api.MaskedFile)
	masked, err := maskpaths.Rewrite(spec, empty)
	if err != nil {
		return err
	}
	if masked {
		if err := api.WriteFile(empty, nil, 0o444); err != nil {
			return fmt.Errorf("masked paths: %w", err)
		}
	}
	class := filepath.Join(task, api.SysClassDir)
	classed := sysclass.Rewrite(spec, class)
	if classed {
		if err := sysclass.Make(class); err != nil {
			return err
		}
	}
	if !masked && !classed {
		return nil
	}
	return writeSpec(dir, spec)
}
