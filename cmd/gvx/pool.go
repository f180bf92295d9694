package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/containerd/log"
	"github.com/urfave/cli/v3"

	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/pool"
	"github.com/gvxrun/gvx/pool/bootspec"
	"github.com/gvxrun/gvx/pool/client"
	"github.com/gvxrun/gvx/pool/poolimage"
)

// poolCommand is `gvx pool …`.
func poolCommand() *cli.Command {
	return &cli.Command{
		Name:  "pool",
		Usage: "the warm pool: sandboxes booted ahead of demand, adopted by tasks at create",
		Description: "Tasks of a runtime handler whose gvx config has [pool] size > 0 adopt a\n" +
			"booted sandbox from `gvx pool serve` (run with the same config) instead of\n" +
			"booting their own, and fall back to booting when none is ready.\n" +
			"See docs/pool.md.",
		Commands: []*cli.Command{poolServeCommand(), poolStatusCommand()},
	}
}

func poolServeCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "keep sandboxes booted and hand them to gvx shims until SIGINT/SIGTERM",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "gvx config of the runtime handler the pool serves (default: " + config.DefaultPath + " if present)"},
			&cli.IntFlag{Name: "size", Usage: "sandboxes to keep ready (default: the config's pool.size)"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if _, err := needArgs(cmd); err != nil {
				return err
			}
			if err := log.SetLevel(cmd.String("log-level")); err != nil {
				return usageError(cmd, "--log-level: "+err.Error())
			}
			cfg, err := config.Load(cmd.String("config"))
			if err != nil {
				return err
			}
			if cmd.IsSet("size") {
				cfg.Pool.Size = int(cmd.Int("size"))
				if err := cfg.Validate(); err != nil {
					return usageError(cmd, "--size: "+err.Error())
				}
			}
			self, _ := os.Executable()
			sentry, err := cfg.SentryPath(self)
			if err != nil {
				return err
			}
			srv, err := pool.NewServer(cfg, sentry)
			if err != nil {
				return err
			}
			srv.OpenImage = poolimage.Opener(cfg)
			// Its log often goes to a pipe of the program that started it
			// (the SDK's pools): when that program dies, the pool gets
			// SIGTERM and must drain — destroy what it has ready — though
			// nobody reads its log any more. Go kills a program writing to
			// a broken stdout or stderr with SIGPIPE unless it is ignored
			// (a pool died mid-drain and left its ready sandbox).
			signal.Ignore(syscall.SIGPIPE)
			ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return srv.Serve(ctx)
		},
	}
}

func poolStatusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show a running pool server's class, size and fill level",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "gvx config naming the pool's socket (default: " + config.DefaultPath + " if present)"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if _, err := needArgs(cmd); err != nil {
				return err
			}
			cfg, err := config.Load(cmd.String("config"))
			if err != nil {
				return err
			}
			st, err := client.Query(ctx, cfg.PoolSocket())
			if err != nil {
				return err
			}
			self, _ := os.Executable()
			mine := "this config's tasks can adopt its sandboxes"
			if sentry, err := cfg.SentryPath(self); err != nil || bootspec.Class(cfg, sentry) != st.Class {
				mine = "this config's tasks CANNOT adopt its sandboxes (another class: its gvx config differs)"
			}
			image := ""
			if st.Image != "" {
				image = ", image " + st.Image
			}
			fmt.Printf("pool %s: class %s%s, %d/%d ready (size %d), %d booted, %d handed out and %d reset back since it started; %s\n",
				cfg.PoolSocket(), st.Class, image, st.Ready, st.Target, st.Size, st.Booted, st.Claimed, st.Reset, mine)
			return nil
		},
	}
}
