package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/gvxrun/gvx"
)

// rmCommand is `gvx rm`.
func rmCommand() *cli.Command {
	return &cli.Command{
		Name:      "rm",
		Usage:     "remove sandboxes and everything they hold",
		ArgsUsage: "ID...",
		Flags: append(sdkFlags(),
			&cli.BoolFlag{Name: "force", Aliases: []string{"f"}, Usage: "kill running ones"},
		),
		Action: exiting(1, func(ctx context.Context, cmd *cli.Command) error {
			ids := cmd.Args().Slice()
			if len(ids) == 0 {
				return usageError(cmd, "missing ID")
			}
			c, err := connectSDK(ctx, cmd)
			if err != nil {
				return err
			}
			defer c.Close(context.WithoutCancel(ctx))
			var errs []error
			for _, id := range ids {
				sb, err := c.Attach(ctx, id)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				if st, _ := sb.Status(ctx); (st == gvx.StatusRunning || st == gvx.StatusPaused) && !cmd.Bool("force") {
					errs = append(errs, fmt.Errorf("sandbox %s is %s: stop it first, or use gvx rm -f", id, st))
					continue
				}
				if err := sb.Close(ctx); err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Fprintln(stdout(cmd), id)
			}
			return errors.Join(errs...)
		}),
	}
}
