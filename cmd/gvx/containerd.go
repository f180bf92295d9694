package main

import (
	"context"

	"github.com/urfave/cli/v3"

	"github.com/gvxrun/gvx/internal/embedded/server"
)

// containerdCommand is the hidden `gvx containerd`: the embedded
// containerd of gvx's SDK and `gvx run` (package internal/embedded), with
// containerd's own command line.
func containerdCommand() *cli.Command {
	return &cli.Command{
		Name:            "containerd",
		Usage:           "run the embedded containerd (started by gvx's SDK and gvx run; containerd's own flags)",
		Hidden:          true,
		SkipFlagParsing: true,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			return server.Main(ctx, cmd.Args().Slice())
		},
	}
}
