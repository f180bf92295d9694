package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/containerd/console"
	"github.com/urfave/cli/v3"

	"github.com/gvxrun/gvx"
)

// The sandbox commands (run, ps, exec, rm) talk to containerd through
// gvx's SDK: by default its embedded containerd, which they start when it
// does not run and which stops when the last sandbox is removed.

// exitCodeGVX is the exit status of `gvx run`/`gvx exec` when gvx itself
// fails (docker's convention), and exitCodeTimeout after --timeout.
const (
	exitCodeGVX     = 125
	exitCodeTimeout = 124
)

// sdkFlags are the flags of the sandbox commands.
func sdkFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "address", Sources: cli.EnvVars("GVX_CONTAINERD"), Usage: "containerd socket (default: gvx's embedded containerd, started when needed)"},
		&cli.StringFlag{Name: "namespace", Value: gvx.DefaultNamespace, Sources: cli.EnvVars("GVX_NAMESPACE"), Usage: "containerd namespace"},
		&cli.StringFlag{Name: "runtime-config", Sources: cli.EnvVars("GVX_RUNTIME_CONFIG"), Usage: "gvx config file for the sandboxes (default: /etc/gvx/config.toml if present)"},
		&cli.StringFlag{Name: "state-dir", Value: gvx.DefaultStateDir, Sources: cli.EnvVars("GVX_STATE_DIR"), Usage: "the SDK's runtime files (embedded containerd's sockets and state, fifos)"},
		&cli.StringFlag{Name: "data-dir", Value: gvx.DefaultDataDir, Sources: cli.EnvVars("GVX_DATA_DIR"), Usage: "the embedded containerd's images and snapshots"},
	}
}

// attachSDK connects the SDK (connectSDK) and finds sandbox id; the
// caller closes the client.
func attachSDK(ctx context.Context, cmd *cli.Command, id string) (*gvx.Client, *gvx.Sandbox, error) {
	c, err := connectSDK(ctx, cmd)
	if err != nil {
		return nil, nil, err
	}
	sb, err := c.Attach(ctx, id)
	if err != nil {
		c.Close(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	return c, sb, nil
}

// connectSDK connects as the sandbox commands' flags say.
func connectSDK(ctx context.Context, cmd *cli.Command) (*gvx.Client, error) {
	return gvx.Connect(ctx, gvx.Options{
		Containerd:    cmd.String("address"),
		Namespace:     cmd.String("namespace"),
		RuntimeConfig: cmd.String("runtime-config"),
		StateDir:      cmd.String("state-dir"),
		DataDir:       cmd.String("data-dir"),
		Progress:      os.Stderr,
	})
}

// exitError ends a sandbox command with an exit status of its own (the
// workload's, or exitCodeGVX), after its cleanups have run.
type exitError struct {
	code int
	err  error // printed unless nil
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

// exiting runs action and exits with the status it asks for; other
// errors exit with code (exitCodeGVX for run and exec, whose own statuses
// are the workload's).
func exiting(code int, action cli.ActionFunc) cli.ActionFunc {
	return func(ctx context.Context, cmd *cli.Command) error {
		err := action(ctx, cmd)
		if err == nil {
			return nil
		}
		var ee *exitError
		if !errors.As(err, &ee) {
			ee = &exitError{code: code, err: err}
		}
		if ee.err != nil {
			// The SDK's errors say "gvx: " already.
			fmt.Fprintln(os.Stderr, "gvx: "+strings.TrimPrefix(ee.err.Error(), "gvx: "))
		}
		os.Exit(ee.code)
		return nil
	}
}

// terminal puts the local terminal in raw mode for a -t session and
// returns its size and a function restoring it.
func terminal(tty bool) (cols, rows uint32, restore func(), err error) {
	cols, rows = termSize(tty)
	restore = func() {}
	if !tty {
		return 0, 0, restore, nil
	}
	c, err := console.ConsoleFromFile(os.Stdin)
	if err != nil {
		return 0, 0, restore, errors.New("-t: the input device is not a terminal (drop -t, or run from one)")
	}
	if err := c.SetRaw(); err != nil {
		return 0, 0, restore, fmt.Errorf("-t: raw mode: %w", err)
	}
	return cols, rows, func() { _ = c.Reset() }, nil
}

// termSize is the size of the terminal on gvx's stdin (0, 0 without one
// or without tty).
func termSize(tty bool) (cols, rows uint32) {
	if !tty {
		return 0, 0
	}
	c, err := console.ConsoleFromFile(os.Stdin)
	if err != nil {
		return 0, 0
	}
	sz, err := c.Size()
	if err != nil {
		return 0, 0
	}
	return uint32(sz.Width), uint32(sz.Height)
}

// forwarded are the signals a foreground sandbox command passes on.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// target is what signals and terminal sizes are forwarded to.
type target interface {
	Signal(ctx context.Context, sig syscall.Signal) error
	Resize(ctx context.Context, cols, rows uint32) error
}

// forwardSignals passes the signals gvx receives to t (window size
// changes as resizes) until stop is called. A second SIGINT or SIGTERM
// calls kill: the target may ignore them.
func forwardSignals(ctx context.Context, t target, tty bool, kill func()) (stop func()) {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, forwarded...)
	done := make(chan struct{})
	go func() {
		interrupts := 0
		for {
			select {
			case <-done:
				return
			case s := <-ch:
				sig := s.(syscall.Signal)
				if sig == syscall.SIGWINCH {
					if tty {
						if c, err := console.ConsoleFromFile(os.Stdin); err == nil {
							if sz, err := c.Size(); err == nil {
								_ = t.Resize(ctx, uint32(sz.Width), uint32(sz.Height))
							}
						}
					}
					continue
				}
				if sig == syscall.SIGINT || sig == syscall.SIGTERM {
					if interrupts++; interrupts > 1 {
						fmt.Fprintln(os.Stderr, "gvx: killing the sandbox")
						kill()
						continue
					}
					if !tty {
						fmt.Fprintf(os.Stderr, "gvx: passed %s on; send it again to kill the sandbox\n", sig)
					}
				}
				_ = t.Signal(ctx, sig)
			}
		}
	}()
	return func() { signal.Stop(ch); close(done) }
}

// stdinFor is the standard input a -i command gets.
func stdinFor(interactive bool) io.Reader {
	if interactive {
		return os.Stdin
	}
	return nil
}
