package nat

import (
	"bytes"
	"encoding/json"
	"os"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/log"

	"github.com/gvxrun/gvx/api"
)

// statsDelay is how long Stats waits to write the file after a change, so
// that a burst of flows is one write.
const statsDelay = 20 * time.Millisecond

// statsSize is the file's fixed size: each update is one write of the
// whole file, JSON padded with spaces.
const statsSize = 1024

// Stats counts a NAT's flows and keeps them in a file (api.NATStats) that
// the privileged parent created for it (the NAT cannot create files in
// the sentry root).
type Stats struct {
	f       *os.File // nil: in memory only
	mu      sync.Mutex
	s       api.NATStats
	pending bool
}

// NewStats is Stats for the NAT process pid, written to f.
func NewStats(f *os.File, pid int) *Stats {
	st := &Stats{f: f}
	st.s.Pid = pid
	st.Flush()
	return st
}

// Get returns the counts.
func (st *Stats) Get() api.NATStats {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.s
}

// bytesOut and bytesIn count relayed bytes, guest → host and back.
func (st *Stats) bytesOut(k int64) { st.add(func(s *api.NATStats) { s.BytesOut += k }) }
func (st *Stats) bytesIn(k int64)  { st.add(func(s *api.NATStats) { s.BytesIn += k }) }

func (st *Stats) add(fn func(*api.NATStats)) {
	st.mu.Lock()
	defer st.mu.Unlock()
	fn(&st.s)
	if st.f != nil && !st.pending {
		st.pending = true
		time.AfterFunc(statsDelay, st.Flush)
	}
}

// open counts a flow opened (+1) or ended (-1) and writes the file at
// once, before the flow's first packet to the guest (or after its last):
// a checkpoint that pauses the guest and then reads Open 0 knows no flow
// of the guest's has a host side (rollout's checkpoint of a NAT sandbox).
func (st *Stats) open(delta int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.s.Open += delta
	st.flushLocked()
}

// Flush writes the file now.
func (st *Stats) Flush() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.flushLocked()
}

func (st *Stats) flushLocked() {
	st.pending = false
	if st.f == nil {
		return
	}
	data, _ := json.Marshal(st.s)
	if len(data) < statsSize {
		data = append(data, bytes.Repeat([]byte{' '}, statsSize-len(data))...)
	}
	if _, err := st.f.WriteAt(data, 0); err != nil {
		log.Warningf("nat: stats: %v", err)
	}
}
