package shim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/checkpoint"
)

// mayConnectOut says whether task's sandbox, whose host process is pid,
// can hold TCP connections to peers outside it: only one on a NAT, or
// whose network namespace has an interface besides loopback, can.
func (t *gvxTask) mayConnectOut(pid uint32) bool {
	if t.network == api.NetworkNone || pid == 0 || t.binary == "" || t.spec.Process == nil {
		return false
	}
	if t.network == api.NetworkNAT {
		return true // its eth0 is the guest's alone: the host namespace may hold lo only
	}
	return checkpoint.BeyondLoopback(int(pid))
}

// outsideTCP refuses the checkpoint of running task id when its sandbox
// holds TCP connections to peers outside it (checkpoint.ErrOutsideTCP): a
// restore could not bring them back, their peers keep no state of them.
// It runs cat of the guest's /proc/net/tcp{,6} through the task's runtime
// (`exec --process`); an image without cat is checkpointed without the
// check, with a warning. (gVisor's control server can cat a guest file
// while the sandbox is paused, but outside a task its /proc/net/tcp shows
// every address as zero.)
func (t *gvxTask) outsideTCP(ctx context.Context, id string) error {
	out, stderr, code, err := t.runIn(ctx, id, checkpoint.TCPTablesCmd, 10*time.Second)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("listing its TCP connections (%s) took over 10 s", strings.Join(checkpoint.TCPTablesCmd, " "))
	}
	if err != nil || code != 0 {
		log.G(ctx).WithError(err).Warnf("gvx shim: %s: cannot list its TCP connections (exit %d: %s); checkpointing without that check", id, code, strings.TrimSpace(string(stderr)))
		return nil
	}
	if peers := checkpoint.OutsidePeers(out); len(peers) > 0 {
		return &checkpoint.ErrOutsideTCP{Peers: peers}
	}
	return nil
}

// runIn runs args in task id's sandbox as its init's process runs (same
// user, environment, directory) through the task's runtime (`exec
// --process`), within timeout, and returns its output and exit code
// (err wraps context.DeadlineExceeded after the timeout).
func (t *gvxTask) runIn(ctx context.Context, id string, args []string, timeout time.Duration) (stdout, stderr []byte, code int, err error) {
	p := *t.spec.Process
	p.Args, p.Terminal, p.ConsoleSize = args, false, nil
	data, err := json.Marshal(&p)
	if err != nil {
		return nil, nil, -1, err
	}
	f, err := os.CreateTemp(t.rec.Bundle, "gvx-exec-*.json")
	if err != nil {
		return nil, nil, -1, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, nil, -1, err
	}
	if err := f.Close(); err != nil {
		return nil, nil, -1, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.binary, "--root", filepath.Join(t.rec.RuncRoot, t.rec.Namespace),
		"--log", filepath.Join(t.rec.Bundle, "log.json"), "--log-format", "json", "exec", "--process", f.Name(), id)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code, err = runReaped(cmd)
	if ctx.Err() != nil {
		return out.Bytes(), errb.Bytes(), code, fmt.Errorf("%s: %w", strings.Join(args, " "), ctx.Err())
	}
	return out.Bytes(), errb.Bytes(), code, err
}
