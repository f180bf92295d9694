package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/google/subcommands"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/sandboxctl"
)

// Kill is runsc's kill of a container gVisor keeps a state of (a sandbox's
// root container, a container in a running sandbox). When it fails and the
// container has stopped or its sandbox is gone, it also says so in runc's
// words, api.NotRunning, which containerd's runc shim takes for NotFound:
// runsc says "sandbox is not running", cannot reach the control socket
// of a sandbox killed from outside, or finds the control server of a
// sandbox that is shutting down (its init just died) closed.
type Kill struct {
	cmd.Kill
}

// Execute implements subcommands.Command.
func (k *Kill) Execute(ctx context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	conf := args[0].(*config.Config)
	// runsc's kill reports a failure with util.Fatalf, which exits once it
	// has written the error to stderr and then to util.ErrorLogger (the
	// --log file): the verdict is given from there.
	util.ErrorLogger = &verdict{next: util.ErrorLogger, why: func(msg string) string { return notRunning(conf.RootDir, f.Arg(0), msg) }}
	return k.Kill.Execute(ctx, f, args...)
}

// notRunning says why container id in root is not running — its sandbox
// is gone, it has stopped, or its sandbox is shutting down — or "" if it
// may still be. msg is runsc's error.
func notRunning(root, id, msg string) string {
	c, err := container.Load(root, container.FullID{ContainerID: id}, container.LoadOpts{})
	switch {
	case err != nil:
		return ""
	case !sandboxctl.Alive(c):
		return fmt.Sprintf("the sandbox of container %s is gone", id)
	case c.Status == container.Stopped:
		return fmt.Sprintf("container %s has stopped", id)
	case controlClosed(msg):
		// The Sentry closes its control server's listening socket only
		// on its way out (a connection to a live one waits in its
		// backlog), so a refusal is a sandbox whose init has died and
		// whose exit containerd has not seen yet: the usual race of a
		// second kill (Delete(WithProcessKill) after a SIGKILL). Give
		// the process a moment to go, then say so either way.
		for deadline := time.Now().Add(shutdownWait); sandboxctl.Alive(c) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		return fmt.Sprintf("the sandbox of container %s is shutting down (its control server is closed)", id)
	}
	return ""
}

// shutdownWait bounds notRunning's wait for a shutting-down sandbox.
const shutdownWait = 2 * time.Second

// controlClosed says whether runsc's error msg is a refused connection to
// a sandbox's control server.
func controlClosed(msg string) bool {
	return strings.Contains(msg, "control server") && strings.Contains(msg, syscall.ECONNREFUSED.Error())
}

// verdict stands in for util.ErrorLogger while runsc's kill runs. On the
// first error written to it, it passes the error on and, if why gives a
// reason, reports api.NotRunning with it the way runsc reports errors (on
// stderr and in the --log file).
type verdict struct {
	next io.Writer // runsc's error logger (nil without --log)
	why  func(msg string) string
	done bool
}

func (v *verdict) Write(b []byte) (int, error) {
	n, err := len(b), error(nil)
	if v.next != nil {
		n, err = v.next.Write(b)
	}
	if !v.done {
		v.done = true
		if why := v.why(string(b)); why != "" {
			util.ErrorLogger = v.next
			util.Errorf("%s: %s", api.NotRunning, why)
		}
	}
	return n, err
}
