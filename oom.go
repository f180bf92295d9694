package gvx

import (
	"context"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/typeurl/v2"
)

// watchOOM records a TaskOOM event of the sandbox in s.oomKilled (Run
// then says ErrOOM) when it has a memory limit; the returned function,
// called with the init's exit status, stops watching (after a short wait
// for the event when the status is a SIGKILL's).
func (s *Sandbox) watchOOM(ctx context.Context) func(uint32) {
	if s.cfg.Resources.MemoryBytes <= 0 && s.c.cfg.Resources.MemoryBytes <= 0 {
		return func(uint32) {}
	}
	sctx, cancel := context.WithCancel(s.c.Context(context.WithoutCancel(ctx)))
	evs, errs := s.c.ctrd.Subscribe(sctx, `topic=="/tasks/oom"`)
	got := make(chan struct{})
	go func() {
		for {
			select {
			case env := <-evs:
				if v, err := typeurl.UnmarshalAny(env.Event); err == nil {
					if ev, ok := v.(*apievents.TaskOOM); ok && ev.ContainerID == s.id {
						s.oomKilled.Store(true)
						close(got)
						return
					}
				}
			case <-errs:
				return
			case <-sctx.Done():
				return
			}
		}
	}()
	return func(code uint32) {
		if code == 137 {
			select {
			case <-got:
			case <-time.After(500 * time.Millisecond):
			}
		}
		cancel()
	}
}

// diedOOM reports whether the sandbox ended at its memory limit: asked
// when one of its execs ends by a signal, whose exit can arrive before the
// init's. A sandbox still running was not killed (an OOM kill takes the
// whole sandbox); else its init's exit gets a second.
func (s *Sandbox) diedOOM(ctx context.Context) bool {
	if s.cfg.Resources.MemoryBytes <= 0 && s.c.cfg.Resources.MemoryBytes <= 0 {
		return false
	}
	if s.oomKilled.Load() {
		return true
	}
	if t := s.curTask(); t != nil {
		if st, err := t.Status(s.c.Context(ctx)); err == nil && st.Status == client.Running {
			return false
		}
	}
	select {
	case <-s.Exited():
	case <-time.After(time.Second):
		return false
	}
	return s.oomKilled.Load() // watch closes exited once watchOOM has had the event's moment
}
