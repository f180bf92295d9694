package rollout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/checkpoint"
)

// mayConnectOut says whether a sandbox that is not on a NAT, with
// gvx-sentry flags flags and host process pid, can hold TCP connections
// to peers outside it: only one whose network namespace has an interface
// besides loopback can. (A NAT sandbox's gVisor network is "none" and its
// host namespace may hold loopback alone, yet its guest has eth0: the
// caller asks it, natQuiet.)
func mayConnectOut(flags string, pid int) bool {
	if slices.Contains(strings.Fields(flags), "--network=none") || pid <= 0 {
		return false // no sandbox process to look at: gVisor's save says what is wrong
	}
	return checkpoint.BeyondLoopback(pid)
}

// outsideTCP refuses a sandbox with TCP connections to peers outside it
// (checkpoint.ErrOutsideTCP), asking through an exec of cat of the
// guest's /proc/net/tcp{,6} (an image without cat is not checked, with a
// warning). Callers ask only a sandbox that may hold one (mayConnectOut,
// natQuiet).
func (e *Engine) outsideTCP(ctx context.Context, b *backing, spec *specs.Spec) error {
	// The exit status does not matter: cat fails on a table the guest
	// lacks and lists the others.
	out, _, _, err := e.execIn(ctx, b, spec, "gvx-ck-tcp-", checkpoint.TCPTablesCmd)
	switch {
	case errors.Is(err, errExecTimeout):
		return errors.New("listing its TCP connections (cat /proc/net/tcp) took over 10 s")
	case err != nil:
		log.G(ctx).WithError(err).Warnf("gvx rollout: %s: cannot list its TCP connections; checkpointing without that check", b.id)
		return nil
	}
	if peers := checkpoint.OutsidePeers(out); len(peers) > 0 {
		return fmt.Errorf("%w: %w", ErrNotCheckpointable, &checkpoint.ErrOutsideTCP{Peers: peers})
	}
	return nil
}

// errExecTimeout is execIn's when the command ran over 10 s (killed).
var errExecTimeout = errors.New("the command ran over 10 s")

// innerTCP refuses the checkpoint of docker-mode backing b while its
// inner containers' own network namespaces hold TCP sockets whose restore
// would never finish (checkpoint.InnerTCP).
func (e *Engine) innerTCP(ctx context.Context, b *backing, spec *specs.Spec) error {
	err := checkpoint.InnerTCP(e.execIn(ctx, b, spec, "gvx-ck-itcp-", checkpoint.InnerTCPCmd))
	if errors.Is(err, api.ErrInnerTCP) {
		return fmt.Errorf("%w: %w", ErrNotCheckpointable, err)
	}
	return err
}

// execIn runs args (with the init's user and environment) in backing b,
// with exec ids starting with prefix, and returns its stdout, stderr and
// exit code, killing it after 10 s (errExecTimeout).
func (e *Engine) execIn(ctx context.Context, b *backing, spec *specs.Spec, prefix string, args []string) (stdout, stderr []byte, code int, err error) {
	if spec.Process == nil {
		return nil, nil, -1, errors.New("the container has no process")
	}
	p := *spec.Process
	p.Args, p.Terminal = args, false
	var out, errOut bytes.Buffer
	id := prefix + strconv.FormatInt(e.seq.Add(1), 36)
	proc, err := b.task.Exec(ctx, id, &p, cio.NewCreator(cio.WithStreams(nil, &out, &errOut)))
	if err != nil {
		return nil, nil, -1, err
	}
	defer func() { _, _ = proc.Delete(context.WithoutCancel(ctx)) }()
	wait, err := proc.Wait(ctx)
	if err == nil {
		err = proc.Start(ctx)
	}
	if err != nil {
		return nil, nil, -1, err
	}
	var st client.ExitStatus
	select {
	case st = <-wait:
	case <-time.After(10 * time.Second):
		_ = proc.Kill(ctx, 9)
		return nil, nil, -1, errExecTimeout
	}
	proc.IO().Wait()
	return out.Bytes(), errOut.Bytes(), int(st.ExitCode()), nil
}
