package main

import (
	"github.com/urfave/cli/v3"
)

// volumeCommand is `gvx volume …`.
func volumeCommand() *cli.Command {
	return &cli.Command{
		Name:  "volume",
		Usage: "manage ext4lite volume images",
	}
}
