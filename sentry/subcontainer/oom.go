package subcontainer

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sentry/control"
	"gvisor.dev/gvisor/pkg/urpc"
	"gvisor.dev/gvisor/runsc/boot"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/gvxrun/gvx/api"
)

// A container in a running sandbox shares the sandbox's host process, so
// the host's memory cgroup cannot hold it to its own limit: gVisor
// accounts each container's memory (its cgroup inside the sandbox) but
// does not enforce the limit. The monitor does: it polls the container's
// usage (every oomPoll) and, past the limit, kills every process of the container with
// SIGKILL — the container exits 137, as the kernel's OOM killer would
// leave it — and records the kill in the OOM marker, from which the shim
// reports a TaskOOM event before the exit.

// oomPoll is how often the monitor reads a limited container's usage.
const oomPoll = 200 * time.Millisecond

// memoryLimit is container c's memory limit in bytes (0: none).
func memoryLimit(c *container.Container) int64 {
	if c.Spec == nil || c.Spec.Linux == nil || c.Spec.Linux.Resources == nil || c.Spec.Linux.Resources.Memory == nil {
		return 0
	}
	if l := c.Spec.Linux.Resources.Memory.Limit; l != nil && *l > 0 {
		return *l
	}
	return 0
}

// oomWatch holds what the monitor needs, opened while it is still root, to
// enforce container c's memory limit after it drops its privileges.
type oomWatch struct {
	c      *container.Container
	limit  int64
	conn   *urpc.Client
	marker *os.File
	// noCgroup: the sandbox has no memory cgroup of the container's; its
	// event reports its usage.
	noCgroup bool
}

// newOOMWatch prepares the enforcement of c's memory limit: a control
// connection of its own (the monitor's other one blocks in the wait) and
// the OOM marker in root, empty. Nil if c has no limit.
func newOOMWatch(root api.SentryRoot, c *container.Container, connect func() (*urpc.Client, error)) (*oomWatch, error) {
	limit := memoryLimit(c)
	if limit == 0 {
		return nil, nil
	}
	marker, err := os.OpenFile(root.OOMMarker(c.ID), os.O_CREATE|os.O_TRUNC|os.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("OOM marker: %w", err)
	}
	conn, err := connect()
	if err != nil {
		marker.Close()
		return nil, err
	}
	return &oomWatch{c: c, limit: limit, conn: conn, marker: marker}, nil
}

// run polls the container's memory usage until it exceeds the limit, then
// records the OOM and kills the container's processes. It returns when
// the container is gone (a poll fails).
func (w *oomWatch) run() {
	t := time.NewTicker(oomPoll)
	defer t.Stop()
	for range t.C {
		usage, err := w.usage()
		if err != nil {
			return
		}
		if usage <= uint64(w.limit) {
			continue
		}
		log.Warningf("monitor: container %s uses %d bytes, over its memory limit of %d: killing it", w.c.ID, usage, w.limit)
		if _, err := fmt.Fprintf(w.marker, "usage %d limit %d\n", usage, w.limit); err != nil {
			log.Warningf("monitor: record the OOM kill of %s: %v", w.c.ID, err)
		}
		args := boot.SignalArgs{CID: w.c.ID, Signo: int32(unix.SIGKILL), Mode: boot.DeliverToAllProcesses}
		if err := w.conn.Call(boot.ContMgrSignal, &args, nil); err != nil {
			log.Warningf("monitor: OOM kill of %s: %v", w.c.ID, err)
		}
		return
	}
}

// usage reads the container's memory usage: its memory cgroup's inside
// the sandbox (a control file: cheap), else, when the sandbox has no
// cgroups, from the container's event (what `runsc events` reports, which
// computes much more).
func (w *oomWatch) usage() (uint64, error) {
	if !w.noCgroup {
		files := control.CgroupsReadArgs{}
		for _, name := range []string{"memory.usage_in_bytes", "memory.current"} { // cgroup v1, v2
			files.Args = append(files.Args, control.CgroupsReadArg{File: control.CgroupControlFile{Controller: "memory", Path: "/" + w.c.ID, Name: name}})
		}
		var out control.CgroupsResults
		if err := w.conn.Call(boot.CgroupsReadControlFiles, &files, &out); err != nil {
			return 0, err // the sandbox is gone
		}
		for i := range out.Results {
			if v, err := out.Results[i].Unpack(); err == nil {
				if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
					return n, nil
				}
			}
		}
		w.noCgroup = true
	}
	var out boot.EventOut
	if err := w.conn.Call(boot.ContMgrEvent, &w.c.ID, &out); err != nil {
		return 0, err
	}
	return out.Event.Data.Memory.Usage.Usage, nil
}
