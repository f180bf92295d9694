package shim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/oci"
	"github.com/gvxrun/gvx/pool/client"
	"github.com/gvxrun/gvx/sandbox"
)

// newOwner names a task as the owner of the pool sandbox it claims: its
// namespace and id, and a nonce (ids are reused).
func newOwner(ns, id string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return ns + "/" + id + "/" + hex.EncodeToString(b[:])
}

// resettable says whether the task's adopted sandbox may go back to its
// pool after the task (pool.reset): the task ran as a container in it —
// not as a process in its root container (an image pool's task writes
// the root container's own root filesystem) — without docker mode or
// ext4lite volumes (both set up things in the sandbox beyond the
// container), and the pool recorded the sandbox's state at boot.
func (t *gvxTask) resettable() bool {
	r := t.rec
	// A pod's sandbox is the pod's to the end: its network (the pod's
	// interfaces) is not the pool's.
	return t.cfg.Pool.Reset && r.Adopted && t.role == oci.RoleNone && !r.PoolProcess && !r.Docker && t.vols == nil && len(t.mounted) == 0 &&
		r.Sandbox != nil && r.Sandbox.Pool != nil && r.Sandbox.Baseline != nil
}

// resetSandbox runs after the task's container was deleted from its
// adopted sandbox (its processes killed, its mounts gone with them): it
// releases the task's host resources and, if that went cleanly, offers
// the sandbox back to its pool, whose server restores and verifies the
// guest (sandbox.Probe, Verify) off the task's delete path and destroys
// the sandbox if the check fails. If the pool refuses, the sandbox stays
// the task's and release destroys it. The record says Returning before
// anything is handed over, and ownership passes with the sandbox's
// claimed marker (record.ownsSandbox), so a crash at any point leaves the
// sandbox with exactly one owner.
func (t *gvxTask) resetSandbox(ctx context.Context) {
	if !t.resettable() {
		return
	}
	r, sb := t.rec, t.rec.Sandbox
	t0 := time.Now()
	r.Returning = true
	if err := r.save(); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx shim: %s: destroying pool sandbox %s", r.ID, sb.ID)
		return
	}
	ret := client.Return{ID: sb.ID, Owner: r.Owner}
	if err := t.checkReset(ctx); err != nil {
		ret.Failed, ret.Detail = sandbox.ResetProbe, err.Error()
		var re *sandbox.ResetError
		if errors.As(err, &re) {
			ret.Failed, ret.Detail = re.Reason, re.Detail
		}
	}
	ret.Seconds = time.Since(t0).Seconds()
	back, err := client.GiveBack(ctx, sb.Pool.Socket, ret)
	if err != nil {
		log.G(ctx).WithError(err).Warnf("gvx shim: %s: destroying pool sandbox %s", r.ID, sb.ID)
	}
	if !back {
		if ret.Failed != "" && ret.Failed != client.MaxUses {
			log.G(ctx).Warnf("gvx shim: %s: pool sandbox %s failed its reset (%s: %s); destroying it", r.ID, sb.ID, ret.Failed, ret.Detail)
		}
		return
	}
	// A crash here leaves a record naming a sandbox its pool owns again.
	t.crashAfter(ctx, FaultReset)
	log.G(ctx).Debugf("gvx shim: %s: pool sandbox %s released in %s, back to its pool", r.ID, sb.ID, time.Since(t0))
	r.Sandbox = nil
	if err := r.save(); err != nil {
		log.G(ctx).WithError(err).Warnf("gvx shim: record task %s", r.ID)
	}
}

// checkReset releases the task's host resources; a *sandbox.ResetError
// (or client.MaxUses's) says why the sandbox cannot go back.
func (t *gvxTask) checkReset(ctx context.Context) error {
	r, sb := t.rec, t.rec.Sandbox
	if n := t.cfg.Pool.Uses(); sb.Uses+1 >= n {
		return &sandbox.ResetError{Reason: client.MaxUses, Detail: fmt.Sprintf("served %d tasks (pool.max_uses %d)", sb.Uses+1, n)}
	}
	if errs := r.releaseHost(ctx); len(errs) > 0 {
		return &sandbox.ResetError{Reason: sandbox.ResetHost, Detail: errors.Join(errs...).Error()}
	}
	return nil
}
