package shim

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"
)

// The Start of a task created from a checkpoint is where containerd's
// runc task service opens the task's stdout and stderr FIFOs for writing
// (its created-from-checkpoint state copies output only from the start):
// an open that waits for a reader, holding the task's lock. When the
// client that created the task died before it, nobody reads them any
// more, and the Start never returns: every State, Kill and Delete of the
// task waits behind it (a gvx serve restarted after a crash could not
// remove a pool sandbox's restore, whose shim stayed). An exec's Start
// opens its FIFOs the same way, for up to 30 s, after its process has
// started, and an init's exit is published only once every exec started
// has: a client that died between an exec's create and its start (a gvx
// serve SIGKILLed during a command) held the exit of a task it had
// killed for 30 s. So while such a Start runs past startWatchAfter, the
// shim looks for a reader of each FIFO among the host's processes and,
// finding none, opens it for reading itself (as for an abandoned create,
// inflight.go) until the Start returns. The output goes nowhere; its
// client is gone.

// startStandIns counts the FIFOs the shim has read for a Start.
var startStandIns atomic.Int64

// startWatchAfter is how long a Start runs before the shim looks; a
// restore takes a fraction of it.
var startWatchAfter = 2 * time.Second

// watchStart watches t's Start of a task restored from a checkpoint
// until the returned stop is called.
func (s *service) watchStart(ctx context.Context, t *gvxTask) (stop func()) {
	if t == nil || t.restoring == nil || t.req == nil {
		return func() {}
	}
	return watchOutputs(ctx, "the start of "+t.rec.ID, t.req.Stdout, t.req.Stderr)
}

// watchExecStart watches the Start of exec id of task until the returned
// stop is called.
func (s *service) watchExecStart(ctx context.Context, task, id string) (stop func()) {
	var outputs []string
	s.mu.Lock()
	if x := s.execs[task][id]; x != nil {
		outputs = x.outputs
	}
	s.mu.Unlock()
	return watchOutputs(ctx, "the start of exec "+id+" of "+task, outputs...)
}

// watchOutputs stands in for the reader of each of the FIFOs among paths
// that a Start (what) has waited on past startWatchAfter and no process
// has open, until the returned stop is called.
func watchOutputs(ctx context.Context, what string, paths ...string) (stop func()) {
	outputs := fifos(paths...)
	if len(outputs) == 0 {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var held []int
		defer func() {
			for _, fd := range held {
				unix.Close(fd)
			}
		}()
		tick := time.NewTimer(startWatchAfter)
		defer tick.Stop()
		for len(outputs) > 0 {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			var left []string
			for _, p := range outputs {
				if hasOpener(p) {
					left = append(left, p)
					continue
				}
				fd, err := openReader(p)
				if err != nil {
					continue
				}
				held = append(held, fd)
				startStandIns.Add(1)
				log.G(ctx).Warnf("gvx shim: %s waits to write to %s, which nothing reads (its client is gone): reading it", what, p)
			}
			outputs = left
			tick.Reset(time.Second)
		}
		<-done
	}()
	return func() {
		close(done)
		<-finished
	}
}

// hasOpener says whether a process other than this one has the FIFO at
// p open (its reader, the task's client). It reads every process's fds:
// only a Start that is stuck pays for it.
func hasOpener(p string) bool {
	st, err := os.Stat(p)
	if err != nil {
		return false
	}
	want, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	self := strconv.Itoa(os.Getpid())
	for _, pr := range procs {
		pid := pr.Name()
		if pid == "" || pid[0] < '0' || pid[0] > '9' || pid == self {
			continue
		}
		dir := filepath.Join("/proc", pid, "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err != nil || !strings.HasPrefix(l, "/") {
				continue
			}
			var fst unix.Stat_t
			if unix.Stat(filepath.Join(dir, fd.Name()), &fst) == nil && fst.Ino == want.Ino && fst.Dev == want.Dev {
				return true
			}
		}
	}
	return false
}
