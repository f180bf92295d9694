package gvxbackend

import (
	"context"
	"sync"
	"time"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/internal/randid"
	"github.com/gvxrun/gvx/serve/backend"
)

// HotRefillDelay is how long after a hand-over the hot set starts to
// acquire its replacement: the acquire (containerd, the shim, the pool's
// claim, and the pool's boot of a sandbox in its place) would otherwise
// share the CPU with the handed-over sandbox's first commands.
var HotRefillDelay = 250 * time.Millisecond

// hotSet keeps sandboxes of a template's pool acquired ahead of creates:
// a create from it is a hand-over (≈ 1 ms) instead of a pool's Acquire
// (a containerd container and task, the shim, the pool's claim, the
// template's init started), and the pool's boot of the replacement runs
// off the create's path, so it does not share the CPU with the new
// sandbox's first command either.
type hotSet struct {
	t    backend.Template
	pool *gvx.Pool
	want int

	mu      sync.Mutex
	ready   []*gvx.Sandbox
	pending map[string]bool // ids being acquired
	closed  bool
	kick    chan struct{}
	done    chan struct{}
}

func newHotSet(t backend.Template, p *gvx.Pool, want int) *hotSet {
	h := &hotSet{t: t, pool: p, want: want, pending: map[string]bool{}, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go h.fill()
	h.wake()
	return h
}

func (h *hotSet) wake() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// take hands a hot sandbox over (nil if none is ready).
func (h *hotSet) take() *gvx.Sandbox {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || len(h.ready) == 0 {
		return nil
	}
	sb := h.ready[0]
	h.ready = h.ready[1:]
	time.AfterFunc(HotRefillDelay, h.wake)
	return sb
}

// ids are the hot sandboxes' ids, ready or being acquired.
func (h *hotSet) ids() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]bool{}
	for id := range h.pending {
		out[id] = true
	}
	for _, sb := range h.ready {
		out[sb.ID()] = true
	}
	return out
}

func (h *hotSet) status() (want, ready int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.want, len(h.ready)
}

// fill acquires until want are ready, each time it is woken.
func (h *hotSet) fill() {
	defer close(h.done)
	for range h.kick {
		for {
			h.mu.Lock()
			if h.closed || len(h.ready)+len(h.pending) >= h.want {
				h.mu.Unlock()
				break
			}
			id := randid.New("h", 20)
			h.pending[id] = true
			h.mu.Unlock()
			sb, err := h.acquire(id)
			h.mu.Lock()
			delete(h.pending, id)
			if err == nil && !h.closed {
				h.ready = append(h.ready, sb)
				sb = nil
			}
			closed := h.closed
			h.mu.Unlock()
			if sb != nil {
				_ = sb.Close(context.Background())
			}
			if err != nil {
				log.L.WithError(err).Warnf("gvx serve: template %s: no hot sandbox (creates acquire from the pool)", h.t.Name)
				break // the next hand-over or create tries again
			}
			if closed {
				return
			}
		}
	}
}

// acquire takes a sandbox from the pool.
func (h *hotSet) acquire(id string) (*gvx.Sandbox, error) {
	return h.pool.Acquire(context.Background(), gvx.AcquireOptions{ID: id})
}

// close stops filling and closes the ready sandboxes.
func (h *hotSet) close(ctx context.Context) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	ready := h.ready
	h.ready = nil
	close(h.kick)
	h.mu.Unlock()
	<-h.done
	for _, sb := range ready {
		if err := sb.Close(ctx); err != nil {
			log.G(ctx).WithError(err).Warnf("gvx serve: close hot sandbox %s", sb.ID())
		}
	}
}
