package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/urfave/cli/v3"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/rollout"
)

// DefaultCheckpointStore is where the CLI keeps checkpoints unless told.
var defaultCheckpointStore = filepath.Join(gvx.DefaultDataDir, "checkpoints")

// checkpointFlags are the flags of the checkpoint commands.
func checkpointFlags() []cli.Flag {
	return append(sdkFlags(), &cli.StringFlag{Name: "store", Value: defaultCheckpointStore, Sources: cli.EnvVars("GVX_CHECKPOINT_STORE"),
		Usage: "checkpoint store directory (on XFS or btrfs, volume copies are reflinks)"})
}

// withEngine runs fn with a rollout engine on the SDK's containerd.
func withEngine(ctx context.Context, cmd *cli.Command, fn func(ctx context.Context, e *rollout.Engine) error) error {
	c, err := connectSDK(ctx, cmd)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	cfg, err := config.Load(cmd.String("runtime-config"))
	if err != nil {
		return err
	}
	// No restore targets: one would be booted in the background and
	// destroyed as this command's engine closes.
	o := rollout.Options{StoreDir: cmd.String("store"), StateDir: cfg.StateDir, NoTargets: true}
	if p := cmd.String("runtime-config"); p != "" {
		o.RuntimeOptions = &runtimeoptions.Options{ConfigPath: p}
	}
	e, err := rollout.New(c.Containerd(), o)
	if err != nil {
		return err
	}
	ctx = c.Context(ctx)
	defer e.Close(context.WithoutCancel(ctx))
	return fn(ctx, e)
}

func checkpointCommand() *cli.Command {
	return &cli.Command{
		Name:      "checkpoint",
		Usage:     "save a running sandbox's processes and files; prints the checkpoint's handle",
		ArgsUsage: "ID",
		Description: "The sandbox is paused while gVisor saves its kernel and memory and its ext4lite\n" +
			"volumes are copied, then runs on. See docs/checkpoint.md.",
		Flags: checkpointFlags(),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			args, err := needArgs(cmd, "ID")
			if err != nil {
				return err
			}
			return withEngine(ctx, cmd, func(ctx context.Context, e *rollout.Engine) error {
				sb, err := e.Adopt(ctx, args[0])
				if err != nil {
					return err
				}
				h, err := e.Checkpoint(ctx, sb)
				if err != nil {
					return err
				}
				fmt.Println(h.ID)
				fmt.Fprintf(os.Stderr, "paused %s\n", h.Paused.Round(time.Microsecond))
				return nil
			})
		},
	}
}

func rollbackCommand() *cli.Command {
	return &cli.Command{
		Name:      "rollback",
		Usage:     "return a sandbox to a checkpoint of its own, under its own id",
		ArgsUsage: "ID CHECKPOINT",
		Description: "Its task is replaced by one restored from the checkpoint (processes, memory,\n" +
			"root filesystem writes and volumes as they were). The restored task's output\n" +
			"goes to --log (appended), or nowhere.",
		Flags: append(checkpointFlags(), &cli.StringFlag{Name: "log", Usage: "append the restored task's stdout and stderr to this file"}),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			args, err := needArgs(cmd, "ID", "CHECKPOINT")
			if err != nil {
				return err
			}
			creator := cio.NullIO
			if p := cmd.String("log"); p != "" {
				abs, err := filepath.Abs(p)
				if err != nil {
					return err
				}
				creator = cio.LogFile(abs)
			}
			return withEngine(ctx, cmd, func(ctx context.Context, e *rollout.Engine) error {
				took, err := e.RollbackInPlace(ctx, args[0], args[1], creator)
				if err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "rolled %s back to %s in %s\n", args[0], args[1], took.Round(time.Microsecond))
				return nil
			})
		},
	}
}

func forkCommand() *cli.Command {
	return &cli.Command{
		Name:      "fork",
		Usage:     "start N new sandboxes from a checkpoint; prints their ids",
		ArgsUsage: "CHECKPOINT N",
		Flags:     checkpointFlags(),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			args, err := needArgs(cmd, "CHECKPOINT", "N")
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				return usageError(cmd, fmt.Sprintf("N %q: want a number ≥ 1", args[1]))
			}
			return withEngine(ctx, cmd, func(ctx context.Context, e *rollout.Engine) error {
				forks, err := e.Fork(ctx, args[0], n)
				if err != nil {
					return err
				}
				for _, f := range forks {
					fmt.Println(f.ID)
				}
				return nil
			})
		},
	}
}

func checkpointsCommand() *cli.Command {
	return &cli.Command{
		Name:  "checkpoints",
		Usage: "list the checkpoints in the store (a tree: each names its parent)",
		Flags: checkpointFlags(),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if _, err := needArgs(cmd); err != nil {
				return err
			}
			st, err := rollout.OpenStore(cmd.String("store"))
			if err != nil {
				return err
			}
			hs, err := st.List()
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "CHECKPOINT\tPARENT\tLINEAGE\tSANDBOX\tCREATED\tPAUSED\tDISK")
			for _, h := range hs {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%.1f MiB\n", h.ID, orDash(h.Parent), h.Lineage, h.Sandbox,
					h.Created.Format(time.RFC3339), h.Paused.Round(time.Microsecond), float64(st.Bytes(h.ID))/(1<<20))
			}
			return w.Flush()
		},
		Commands: []*cli.Command{{
			Name:      "rm",
			Usage:     "release checkpoints (their files go; sandboxes restored from them stay)",
			ArgsUsage: "CHECKPOINT...",
			Action: func(ctx context.Context, cmd *cli.Command) error {
				if cmd.NArg() == 0 {
					return usageError(cmd, "name at least one CHECKPOINT")
				}
				return withEngine(ctx, cmd, func(ctx context.Context, e *rollout.Engine) error {
					for _, id := range cmd.Args().Slice() {
						if err := e.Release(ctx, id); err != nil {
							return err
						}
					}
					return nil
				})
			},
		}},
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
