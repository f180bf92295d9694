package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/gvxrun/gvx"
)

// psCommand is `gvx ps`.
func psCommand() *cli.Command {
	return &cli.Command{
		Name:  "ps",
		Usage: "list sandboxes (running ones; -a: all)",
		Flags: append(sdkFlags(),
			&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "also those that exited"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "ids only"},
		),
		Action: exiting(1, func(ctx context.Context, cmd *cli.Command) error {
			if _, err := needArgs(cmd); err != nil {
				return err
			}
			c, err := connectSDK(ctx, cmd)
			if err != nil {
				return err
			}
			defer c.Close(context.WithoutCancel(ctx))
			infos, err := c.List(ctx)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(stdout(cmd), 0, 4, 2, ' ', 0)
			if !cmd.Bool("quiet") {
				fmt.Fprintln(w, "ID\tIMAGE\tSTATUS\tCREATED\tCOMMAND")
			}
			for _, i := range infos {
				if !cmd.Bool("all") && i.Status != gvx.StatusRunning && i.Status != gvx.StatusPaused {
					continue
				}
				if cmd.Bool("quiet") {
					fmt.Fprintln(w, i.ID)
					continue
				}
				command := strings.Join(i.Cmd, " ")
				if len(command) > 40 {
					command = command[:37] + "..."
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s ago\t%s\n", i.ID, i.Image, i.Status, time.Since(i.Created).Round(time.Second), command)
			}
			return w.Flush()
		}),
	}
}
