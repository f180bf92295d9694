// Command gvx is gvx's operator CLI.
//
// It runs sandboxes (run, exec, ps, rm, on gvx's Go SDK), manages
// ext4lite volumes, golden images and episodes, the warm pool and the
// ext4lite snapshotter, and does the housekeeping of gvx sandboxes.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v3"
)

func main() {
	app := &cli.Command{
		Name:  "gvx",
		Usage: "operate gvx sandboxes and ext4lite volumes",
		Commands: []*cli.Command{
			volumeCommand(),
			goldenCommand(),
			episodeCommand(),
			snapshotterCommand(),
			poolCommand(),
			containerdCommand(),
			runCommand(),
			execCommand(),
			portForwardCommand(),
			psCommand(),
			rmCommand(),
			serveCommand(),
			checkpointCommand(),
			rollbackCommand(),
			forkCommand(),
			checkpointsCommand(),
			gcCommand(),
		},
	}
	if err := app.Run(context.Background(), os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "gvx: %v\n", err)
		os.Exit(1)
	}
}
