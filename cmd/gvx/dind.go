package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/dind"
	"github.com/gvxrun/gvx/volume"
)

// containerdFlags are the flags of every command that talks to containerd.
func containerdFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "address", Value: "/run/containerd/containerd.sock", Sources: cli.EnvVars("CONTAINERD_ADDRESS"), Usage: "containerd socket"},
		&cli.StringFlag{Name: "namespace", Value: "default", Sources: cli.EnvVars("CONTAINERD_NAMESPACE"), Usage: "containerd namespace"},
		&cli.StringFlag{Name: "runtime-config", Usage: "gvx config file for the sandbox (default: /etc/gvx/config.toml if present)"},
	}
}

// runner connects to containerd through gvx's SDK and returns a
// dind.Runner on it.
func runner(ctx context.Context, cmd *cli.Command) (*dind.Runner, func(), error) {
	return runnerWithStore(ctx, cmd, "")
}

// runnerWithStore is runner with the SDK's checkpoint store in ckDir
// ("": the SDK's default).
func runnerWithStore(ctx context.Context, cmd *cli.Command, ckDir string) (*dind.Runner, func(), error) {
	c, err := gvx.Connect(ctx, gvx.Options{
		Containerd:    cmd.String("address"),
		Namespace:     cmd.String("namespace"),
		RuntimeConfig: cmd.String("runtime-config"),
		Progress:      os.Stderr,
		CheckpointDir: ckDir,
		// A one-shot command: a restore target made in its background
		// would only be destroyed at its exit.
		NoRestoreTargets: true,
	})
	if err != nil {
		return nil, nil, err
	}
	return &dind.Runner{Client: c, Progress: os.Stderr}, func() { _ = c.Close(context.WithoutCancel(ctx)) }, nil
}

func goldenCommand() *cli.Command {
	return &cli.Command{
		Name:  "golden",
		Usage: "build golden /var/lib/docker volumes",
		Commands: []*cli.Command{{
			Name:      "build",
			Usage:     "start a seed dind sandbox on a fresh volume, load image archives, stop cleanly, verify",
			ArgsUsage: "OUT.ext4",
			Flags: append(containerdFlags(),
				&cli.StringFlag{Name: "image", Value: "gvx.test/dind:latest", Usage: "dind image name in containerd, or an image archive to import"},
				&cli.StringSliceFlag{Name: "load", Usage: "image archive (docker save / OCI layout) to preload; repeatable"},
				&cli.StringFlag{Name: "size", Value: "8G", Usage: "volume size"},
				&cli.BoolFlag{Name: "checkpoint", Usage: "also keep a checkpoint of dockerd booted on the volume (in OUT.ext4.ckpt): episodes restore it instead of booting dockerd"},
			),
			Action: func(ctx context.Context, cmd *cli.Command) error {
				args, err := needArgs(cmd, "OUT.ext4")
				if err != nil {
					return err
				}
				size, err := volume.ParseSize(cmd.String("size"))
				if err != nil {
					return usageError(cmd, "--size: "+err.Error())
				}
				r, done, err := runner(ctx, cmd)
				if err != nil {
					return err
				}
				// The client at return: the checkpoint's, below, replaces
				// the build's.
				defer func() { done() }()
				t0 := time.Now()
				res, err := r.BuildGolden(ctx, dind.GoldenOptions{Out: args[0], Size: size, Image: cmd.String("image"), Load: cmd.StringSlice("load")})
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout(cmd), "golden %s: %s used of %s, %s allocated, clean; images: %s (%s)\n", args[0],
					volume.FormatSize(res.Info.Used), volume.FormatSize(res.Info.Size), volume.FormatSize(res.Info.Allocated),
					strings.Join(res.Images, " "), time.Since(t0).Round(time.Millisecond))
				if !cmd.Bool("checkpoint") {
					return nil
				}
				done()
				ckDir := dind.GoldenCheckpointDir(args[0])
				r, done, err = runnerWithStore(ctx, cmd, ckDir)
				if err != nil {
					return err
				}
				t1 := time.Now()
				id, err := r.CheckpointGolden(ctx, args[0], cmd.String("image"), res.Images[:min(1, len(res.Images))])
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout(cmd), "golden %s: checkpoint %s of dockerd in %s (%s)\n", args[0], id, ckDir, time.Since(t1).Round(time.Millisecond))
				return nil
			},
		}},
	}
}

func episodeCommand() *cli.Command {
	return &cli.Command{
		Name:  "episode",
		Usage: "run RL episodes: a dind sandbox on a clone of a golden volume",
		Commands: []*cli.Command{{
			Name:      "start",
			Usage:     "clone the golden volume and start a docker-mode sandbox on it",
			ArgsUsage: "ID",
			Flags: append(containerdFlags(),
				&cli.StringFlag{Name: "golden", Required: true, Usage: "golden volume to clone"},
				&cli.StringFlag{Name: "volume", Usage: "the episode's volume file (default: ID.ext4 next to the golden volume)"},
				&cli.StringFlag{Name: "image", Value: "gvx.test/dind:latest", Usage: "dind image name in containerd, or an image archive to import"},
				&cli.BoolFlag{Name: "boot", Usage: "boot dockerd on a clone even if the golden volume has a checkpoint (gvx golden build --checkpoint)"},
			),
			Action: func(ctx context.Context, cmd *cli.Command) error {
				args, err := needArgs(cmd, "ID")
				if err != nil {
					return err
				}
				if ckDir := dind.GoldenCheckpointDir(cmd.String("golden")); !cmd.Bool("boot") && cmd.String("volume") == "" {
					ck, err := dind.GoldenCheckpoint(ckDir)
					if err != nil {
						return err
					}
					if ck != "" {
						return restoreEpisode(ctx, cmd, args[0], ckDir, ck)
					}
				}
				vol := cmd.String("volume")
				if vol == "" {
					vol = filepath.Join(filepath.Dir(cmd.String("golden")), args[0]+".ext4")
				}
				r, done, err := runner(ctx, cmd)
				if err != nil {
					return err
				}
				defer done()
				ep, err := r.StartEpisode(ctx, args[0], cmd.String("image"), cmd.String("golden"), vol)
				if err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "episode %s: cloned (%s) in %s, dockerd ready after %s\n", ep.ID, ep.Method,
					ep.Clone.Round(time.Microsecond), ep.Ready.Round(time.Millisecond))
				fmt.Fprintf(stdout(cmd), "DOCKER_HOST=unix://%s\n", ep.Docker.Socket)
				return nil
			},
		}, {
			Name:      "rm",
			Usage:     "stop an episode's sandbox and delete its volume",
			ArgsUsage: "ID",
			Flags: append(containerdFlags(),
				&cli.BoolFlag{Name: "keep-volume", Usage: "keep the episode's volume file"},
			),
			Action: func(ctx context.Context, cmd *cli.Command) error {
				args, err := needArgs(cmd, "ID")
				if err != nil {
					return err
				}
				r, done, err := runner(ctx, cmd)
				if err != nil {
					return err
				}
				defer done()
				sb, err := r.Attach(ctx, args[0])
				if err != nil {
					// Restored from a golden checkpoint (the rollout
					// engine's container): Remove knows it.
					if rerr := r.Client.Remove(ctx, args[0]); rerr != nil {
						return errors.Join(err, rerr)
					}
					return nil
				}
				if sb.Volume == "" {
					// Restored from a golden checkpoint: its volume is
					// the checkpoint store's copy, removed with it.
					return r.Client.Remove(ctx, args[0])
				}
				ep := &dind.Episode{Sandbox: sb}
				return ep.Close(ctx, cmd.Bool("keep-volume") || sb.Volume == "")
			},
		}},
	}
}

// restoreEpisode starts episode id restored from golden checkpoint ck in
// store ckDir.
func restoreEpisode(ctx context.Context, cmd *cli.Command, id, ckDir, ck string) error {
	r, done, err := runnerWithStore(ctx, cmd, ckDir)
	if err != nil {
		return err
	}
	defer done()
	ep, err := r.RestoreEpisode(ctx, id, ck)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "episode %s: restored from golden checkpoint %s in %s, dockerd answering after %s\n", ep.ID, ck,
		ep.Restored.Round(time.Millisecond), ep.Ready.Round(time.Millisecond))
	fmt.Fprintf(stdout(cmd), "DOCKER_HOST=unix://%s\n", ep.Docker.Socket)
	return nil
}
