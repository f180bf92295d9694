package rollout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/checkpoint"
)

// outsideTCP refuses a sandbox with TCP connections to peers outside it
// (checkpoint.ErrOutsideTCP). Only a sandbox on a NAT (onNAT), or whose
// network namespace has an interface besides loopback, can have any, so
// only such a sandbox is asked: an exec of cat of the guest's /proc/net/tcp{,6} (an image
// without cat is not checked, with a warning).
func (e *Engine) outsideTCP(ctx context.Context, b *backing, flags string, onNAT bool, spec *specs.Spec) error {
	if !onNAT {
		// A NAT sandbox's gVisor network is "none" and its host network
		// namespace may hold loopback alone, yet its guest has eth0.
		for _, f := range strings.Fields(flags) {
			if f == "--network=none" {
				return nil
			}
		}
		st, err := e.sandboxState(namespaceOf(ctx), b.id)
		if err != nil || st.Pid <= 0 {
			return nil // no sandbox process to look at: gVisor's save says what is wrong
		}
		dev, err := os.ReadFile("/proc/" + strconv.Itoa(st.Pid) + "/net/dev")
		if err != nil || checkpoint.OnlyLoopback(dev) {
			return nil
		}
	}
	if spec.Process == nil {
		return nil
	}
	p := *spec.Process
	p.Args, p.Terminal = checkpoint.TCPTablesCmd, false
	var out, errOut bytes.Buffer
	id := "gvx-ck-tcp-" + strconv.FormatInt(e.seq.Add(1), 36)
	proc, err := b.task.Exec(ctx, id, &p, cio.NewCreator(cio.WithStreams(nil, &out, &errOut)))
	if err != nil {
		log.G(ctx).WithError(err).Warnf("gvx rollout: %s: cannot list its TCP connections; checkpointing without that check", b.id)
		return nil
	}
	defer func() { _, _ = proc.Delete(context.WithoutCancel(ctx)) }()
	wait, err := proc.Wait(ctx)
	if err == nil {
		err = proc.Start(ctx)
	}
	if err != nil {
		log.G(ctx).WithError(err).Warnf("gvx rollout: %s: cannot list its TCP connections; checkpointing without that check", b.id)
		return nil
	}
	select {
	case <-wait:
	case <-time.After(10 * time.Second):
		_ = proc.Kill(ctx, 9)
		return errors.New("listing its TCP connections (cat /proc/net/tcp) took over 10 s")
	}
	proc.IO().Wait()
	if peers := checkpoint.OutsidePeers(out.Bytes()); len(peers) > 0 {
		return fmt.Errorf("%w: %w", ErrNotCheckpointable, &checkpoint.ErrOutsideTCP{Peers: peers})
	}
	return nil
}
