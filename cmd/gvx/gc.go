package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/janitor"
)

// gcCommand is `gvx gc`: one sweep of the janitor.
func gcCommand() *cli.Command {
	return &cli.Command{
		Name:  "gc",
		Usage: "find and reclaim what gvx sandboxes left behind (processes, mounts, loop devices, cgroups, state, pool sandboxes, leases)",
		Description: "Reconciles the host against containerd: sandboxes past their maximum lifetime are\n" +
			"stopped (SIGTERM, then SIGKILL after --grace); shims, sandbox processes, state\n" +
			"directories, mounts, cgroups, pool sandboxes, loop devices, volume clones, image\n" +
			"pools' leases and stdio FIFOs that nothing owns any more are reclaimed. What a containerd still knows\n" +
			"is left alone; if a containerd does not answer, what it may own is skipped.\n" +
			"Exits 1 if anything could not be reclaimed. See docs/operations.md.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "gvx config (state_dir, [janitor]) (default: " + config.DefaultPath + " if present)"},
			&cli.StringFlag{Name: "state-dir", Usage: "gvx state directory (default: the config's state_dir)"},
			&cli.StringSliceFlag{Name: "containerd", Usage: "containerd socket to reconcile against, repeatable (default: the config's janitor.containerd, else pool.containerd)"},
			&cli.StringSliceFlag{Name: "fifo-dir", Usage: "root of containerd clients' stdio FIFO directories, repeatable (default: /run/containerd/fifo and the SDK's /run/gvx/sdk/fifo)"},
			&cli.StringSliceFlag{Name: "shim-socket-dir", Usage: "containerd's shim socket directory, repeatable (default: " + janitor.DefaultShimSocketDir + ")"},
			&cli.StringSliceFlag{Name: "volume-dir", Usage: "directory of ext4lite volumes whose clones and loop devices may be reclaimed, repeatable"},
			&cli.DurationFlag{Name: "max-lifetime", Usage: "stop gvx sandboxes running longer than this (default: the config's janitor.max_lifetime; 0: none)"},
			&cli.DurationFlag{Name: "min-age", Usage: "leave anything younger alone (default: the config's janitor.min_age, 1m)"},
			&cli.DurationFlag{Name: "grace", Usage: "time between SIGTERM and SIGKILL (default: the config's janitor.grace, 10s)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "report what would be reclaimed, change nothing"},
		},
		Action: runGC,
	}
}

func runGC(ctx context.Context, cmd *cli.Command) error {
	if _, err := needArgs(cmd); err != nil {
		return err
	}
	cfg, err := config.Load(cmd.String("config"))
	if err != nil {
		return err
	}
	if cmd.IsSet("state-dir") {
		if cfg.StateDir, err = filepath.Abs(cmd.String("state-dir")); err != nil {
			return err
		}
	}
	self, _ := os.Executable()
	sentry, _ := cfg.SentryPath(self) // without it, pool sandboxes go by their cgroup alone
	o := janitor.FromConfig(cfg, sentry)
	if cmd.IsSet("containerd") {
		o.Containerd = cmd.StringSlice("containerd")
	}
	for flag, dirs := range map[string]*[]string{"fifo-dir": &o.FIFODirs, "shim-socket-dir": &o.ShimSocketDirs} {
		if !cmd.IsSet(flag) {
			continue
		}
		*dirs = nil
		for _, d := range cmd.StringSlice(flag) {
			abs, err := filepath.Abs(d)
			if err != nil {
				return err
			}
			*dirs = append(*dirs, abs)
		}
	}
	for _, d := range cmd.StringSlice("volume-dir") {
		abs, err := filepath.Abs(d)
		if err != nil {
			return err
		}
		o.VolumeDirs = append(o.VolumeDirs, abs)
	}
	for name, d := range map[string]*time.Duration{"max-lifetime": &o.MaxLifetime, "min-age": &o.MinAge, "grace": &o.Grace} {
		if cmd.IsSet(name) {
			if *d = cmd.Duration(name); *d < 0 {
				return usageError(cmd, "--"+name+" must not be negative")
			}
		}
	}
	o.DryRun = cmd.Bool("dry-run")
	r := janitor.Sweep(ctx, o)
	r.Write(os.Stdout)
	if n := r.Failed(); n > 0 {
		return fmt.Errorf("gc: %d leftovers could not be reclaimed (see FAILED above)", n)
	}
	return nil
}
