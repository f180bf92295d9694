package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/volume"
)

// volumeCommand is `gvx volume …`.
func volumeCommand() *cli.Command {
	return &cli.Command{
		Name:  "volume",
		Usage: "manage ext4lite volume images",
		Description: "An ext4lite volume is one sparse ext4 image file holding a sandbox directory\n" +
			"such as /var/lib/docker. Make a golden image once, then clone it per episode:\n" +
			"by reflink on XFS or btrfs (milliseconds), by a sparse copy elsewhere.\n" +
			"Sizes take binary K, M, G or T suffixes (4G = 4 GiB).",
		Commands: []*cli.Command{
			volumeCreateCommand(),
			volumeCloneCommand(),
			volumeInspectCommand(),
			volumeCheckCommand(),
			volumeResizeCommand(),
			volumeRemoveCommand(),
		},
	}
}

func volumeCreateCommand() *cli.Command {
	return &cli.Command{
		Name:      "create",
		Usage:     "make a new sparse image holding an empty ext4 filesystem",
		ArgsUsage: "IMG",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "size", Usage: "filesystem size, e.g. 4G (required)"},
			&cli.StringFlag{Name: "label", Usage: "ext4 volume label, up to 16 bytes"},
			&cli.StringFlag{Name: "owner", Usage: "UID:GID owning the root directory, as the guest sees it (default 0:0: gvx mounts volumes idmapped, so the guest's root owns it)", Value: "0:0"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			args, err := needArgs(cmd, "IMG")
			if err != nil {
				return err
			}
			if !cmd.IsSet("size") {
				return usageError(cmd, "--size is required, e.g. --size 4G")
			}
			size, err := volume.ParseSize(cmd.String("size"))
			if err != nil {
				return usageError(cmd, "--size: "+err.Error())
			}
			owner, err := rootOwner(cmd)
			if err != nil {
				return err
			}
			info, err := volume.Create(ctx, args[0], volume.CreateOptions{Size: size, Label: cmd.String("label"), Owner: &owner})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout(cmd), "created %s: %s ext4, root owned by %s, %s allocated\n",
				args[0], volume.FormatSize(info.Size), owner, volume.FormatSize(info.Allocated))
			return nil
		},
	}
}

// rootOwner is --owner. gvx mounts volumes idmapped into the sandbox's
// user namespace, so ids on disk are the guest's own: 0:0 is the guest's
// root, whatever host uid the sandbox runs as.
func rootOwner(cmd *cli.Command) (volume.Owner, error) {
	o, err := volume.ParseOwner(cmd.String("owner"))
	if err != nil {
		return o, usageError(cmd, "--owner: "+err.Error())
	}
	return o, nil
}

func volumeCloneCommand() *cli.Command {
	return &cli.Command{
		Name:      "clone",
		Usage:     "copy an image to a new file (reflink if possible, else sparse copy)",
		ArgsUsage: "SRC DST",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "force", Usage: "clone even if SRC is not clean or is in use (repair the clone with e2fsck -fp)"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			args, err := needArgs(cmd, "SRC", "DST")
			if err != nil {
				return err
			}
			start := time.Now()
			p := &progress{w: stderr(cmd), start: start, tty: isTerminal(stderr(cmd))}
			method, err := volume.Clone(ctx, args[0], args[1], volume.CloneOptions{
				Force:    cmd.Bool("force"),
				Progress: p.update,
			})
			p.finish()
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout(cmd), "cloned %s to %s: %s in %s\n", args[0], args[1], method, roundDuration(time.Since(start)))
			return nil
		},
	}
}

func volumeInspectCommand() *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "show an image's ext4 superblock (read only, never mounts)",
		ArgsUsage: "IMG",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			args, err := needArgs(cmd, "IMG")
			if err != nil {
				return err
			}
			info, err := volume.Inspect(ctx, args[0])
			if err != nil {
				return err
			}
			if cmd.Bool("json") {
				enc := json.NewEncoder(stdout(cmd))
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			printInfo(stdout(cmd), info)
			return nil
		},
	}
}

func printInfo(w io.Writer, i volume.Info) {
	when := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.Local().Format(time.RFC3339)
	}
	label := i.Label
	if label == "" {
		label = "(none)"
	}
	lastMount := when(i.LastMountTime)
	if i.LastMounted != "" {
		lastMount += " on " + i.LastMounted
	}
	rows := [][2]string{
		{"path", i.Path},
		{"state", i.State},
		{"size", fmt.Sprintf("%s (%d blocks of %d bytes)", volume.FormatSize(i.Size), i.Size/i.BlockSize, i.BlockSize)},
		{"used", fmt.Sprintf("%s (%s free)", volume.FormatSize(i.Used), volume.FormatSize(i.Free))},
		{"inodes", fmt.Sprintf("%d used of %d", i.Inodes-i.FreeInodes, i.Inodes)},
		{"label", label},
		{"uuid", i.UUID},
		{"features", strings.Join(i.Features, " ")},
		{"created", when(i.Created)},
		{"last mount", lastMount},
		{"mounts", fmt.Sprintf("%d since the last full check", i.MountCount)},
		{"last write", when(i.LastWriteTime)},
		{"file", fmt.Sprintf("%s, %s allocated", volume.FormatSize(i.FileSize), volume.FormatSize(i.Allocated))},
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%-11s %s\n", r[0]+":", r[1])
	}
}

func volumeCheckCommand() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "full read-only check of an unused image (e2fsck -fn)",
		ArgsUsage: "IMG",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			args, err := needArgs(cmd, "IMG")
			if err != nil {
				return err
			}
			if err := volume.Check(ctx, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(stdout(cmd), "%s: clean\n", args[0])
			return nil
		},
	}
}

func volumeResizeCommand() *cli.Command {
	return &cli.Command{
		Name:      "resize",
		Usage:     "grow (in place) or shrink (via a copy) an unused image's filesystem",
		ArgsUsage: "IMG SIZE",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			args, err := needArgs(cmd, "IMG", "SIZE")
			if err != nil {
				return err
			}
			size, err := volume.ParseSize(args[1])
			if err != nil {
				return usageError(cmd, err.Error())
			}
			before, err := volume.Inspect(ctx, args[0])
			if err != nil {
				return err
			}
			after, err := volume.Resize(ctx, args[0], size)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout(cmd), "resized %s: %s -> %s\n", args[0], volume.FormatSize(before.Size), volume.FormatSize(after.Size))
			return nil
		},
	}
}

func volumeRemoveCommand() *cli.Command {
	return &cli.Command{
		Name:      "rm",
		Usage:     "delete images that are not in use",
		ArgsUsage: "IMG...",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() == 0 {
				return usageError(cmd, "give at least one IMG")
			}
			var failed []string
			for _, img := range cmd.Args().Slice() {
				if err := volume.Remove(ctx, img); err != nil {
					fmt.Fprintf(stderr(cmd), "gvx: %v\n", err)
					failed = append(failed, img)
					continue
				}
				fmt.Fprintf(stdout(cmd), "removed %s\n", img)
			}
			if len(failed) > 0 {
				return fmt.Errorf("volume rm: %d of %d not removed: %s", len(failed), cmd.NArg(), strings.Join(failed, " "))
			}
			return nil
		},
	}
}

// needArgs returns exactly the named positional arguments or a usage
// error naming what is missing or extra.
func needArgs(cmd *cli.Command, names ...string) ([]string, error) {
	got := cmd.Args().Slice()
	switch {
	case len(got) < len(names):
		return nil, usageError(cmd, fmt.Sprintf("missing %s", strings.Join(names[len(got):], " and ")))
	case len(got) > len(names):
		return nil, usageError(cmd, fmt.Sprintf("unexpected argument %q", got[len(names)]))
	}
	return got, nil
}

// usageError prefixes msg with the command and appends its usage line.
func usageError(cmd *cli.Command, msg string) error {
	name := strings.TrimPrefix(cmd.FullName(), cmd.Root().Name+" ")
	usage := cmd.FullName()
	if cmd.ArgsUsage != "" {
		usage += " [flags] " + cmd.ArgsUsage
	}
	return fmt.Errorf("%s: %s; usage: %s (see --help)", name, msg, usage)
}

func stdout(cmd *cli.Command) io.Writer {
	if w := cmd.Root().Writer; w != nil {
		return w
	}
	return os.Stdout
}

func stderr(cmd *cli.Command) io.Writer {
	if w := cmd.Root().ErrWriter; w != nil {
		return w
	}
	return os.Stderr
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progress shows a slow clone's progress on stderr: nothing for the first
// second, then at most four updates a second on a terminal (one
// rewritten line) or one every five seconds otherwise.
type progress struct {
	w       io.Writer
	start   time.Time
	tty     bool
	last    time.Time
	printed bool
}

func (p *progress) update(done, total int64) {
	now := time.Now()
	every := 5 * time.Second
	if p.tty {
		every = 250 * time.Millisecond
	}
	if now.Sub(p.start) < time.Second || now.Sub(p.last) < every || total <= 0 {
		return
	}
	p.last = now
	line := fmt.Sprintf("cloning: %3d%% (%s of %s, %s)", done*100/total,
		volume.FormatSize(done), volume.FormatSize(total), roundDuration(now.Sub(p.start)))
	if p.tty {
		fmt.Fprintf(p.w, "\r%s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
	p.printed = true
}

func (p *progress) finish() {
	if p.printed && p.tty {
		fmt.Fprintln(p.w)
	}
}

func roundDuration(d time.Duration) time.Duration {
	switch {
	case d > time.Second:
		return d.Round(10 * time.Millisecond)
	case d > 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
