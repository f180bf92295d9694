package main

import (
	"context"
	"errors"
	"os"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/gvxrun/gvx"
)

// execCommand is `gvx exec`.
func execCommand() *cli.Command {
	first := 1
	return &cli.Command{
		Name:                   "exec",
		Usage:                  "run a command in a running sandbox (docker exec's shape)",
		ArgsUsage:              "ID COMMAND [ARG...]",
		Description:            "The command's exit status is gvx exec's; gvx's own errors exit 125, --timeout 124.",
		StopOnNthArg:           &first,
		UseShortOptionHandling: true,
		Flags: append(sdkFlags(),
			&cli.BoolFlag{Name: "interactive", Aliases: []string{"i"}, Usage: "attach standard input"},
			&cli.BoolFlag{Name: "tty", Aliases: []string{"t"}, Usage: "give it a terminal"},
			&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "KEY=VALUE (KEY alone: this process's value); repeatable"},
			&cli.StringFlag{Name: "workdir", Aliases: []string{"w"}, Usage: "working directory"},
			&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "user[:group] or uid[:gid] of the image"},
			&cli.DurationFlag{Name: "timeout", Usage: "kill the command (and what it started) after this long (exit 124)"},
		),
		Action: exiting(exitCodeGVX, execAction),
	}
}

func execAction(ctx context.Context, cmd *cli.Command) error {
	args := cmd.Args().Slice()
	if len(args) < 2 {
		return usageError(cmd, "want a sandbox ID and a COMMAND")
	}
	tty := cmd.Bool("tty")
	if tty && !isTerminal(os.Stdin) {
		return errors.New("-t: the input device is not a terminal (drop -t, or run from one)")
	}
	o := gvx.ExecOptions{Dir: cmd.String("workdir"), User: cmd.String("user"), TTY: tty, Timeout: cmd.Duration("timeout"),
		Stdin: stdinFor(cmd.Bool("interactive")), Stdout: os.Stdout, Stderr: os.Stderr}
	if tty {
		o.Stderr = nil
	}
	for _, kv := range cmd.StringSlice("env") {
		if !strings.Contains(kv, "=") {
			kv += "=" + os.Getenv(kv)
		}
		o.Env = append(o.Env, kv)
	}
	c, sb, err := attachSDK(ctx, cmd, args[0])
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	cols, rows, restore, err := terminal(tty)
	if err != nil {
		return err
	}
	defer restore()
	o.Cols, o.Rows = cols, rows
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p, err := sb.Start(pctx, args[1:], o)
	if err != nil {
		return err
	}
	stop := forwardSignals(ctx, p, tty, cancel)
	res, err := p.Wait(ctx)
	stop()
	restore()
	switch {
	case errors.Is(err, gvx.ErrTimeout):
		return &exitError{code: exitCodeTimeout, err: err}
	case err != nil && res.ExitCode <= 0:
		return err
	case res.ExitCode != 0:
		return &exitError{code: res.ExitCode}
	}
	return nil
}
