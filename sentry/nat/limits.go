package nat

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gvxrun/gvx/api"
)

// limits caps one sandbox's open flows and its bandwidth (api.NAT's
// MaxConnections and Bandwidth).
type limits struct {
	max      int64        // 0: no cap
	open     atomic.Int64 // flows open now
	up, down *bucket      // guest → host, host → guest; nil: no cap
}

func newLimits(cfg api.NAT) *limits {
	l := &limits{max: int64(cfg.MaxConnections)}
	if cfg.Bandwidth > 0 {
		l.up, l.down = newBucket(cfg.Bandwidth), newBucket(cfg.Bandwidth)
	}
	return l
}

// acquire takes a flow slot: false when MaxConnections are open.
func (l *limits) acquire() bool {
	for {
		cur := l.open.Load()
		if l.max > 0 && cur >= l.max {
			return false
		}
		if l.open.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

// release gives back a slot acquire took.
func (l *limits) release() { l.open.Add(-1) }

// bucket is a token bucket of rate bytes per second. A caller takes what
// it already read and sleeps off the debt, so flows sharing a bucket
// queue behind each other in order and the long-run rate is the cap.
type bucket struct {
	rate  float64 // bytes per second
	burst float64 // tokens kept at most: what an idle bucket lets pass at once
	chunk int     // the most a caller reads before it takes tokens

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// bucketSlice is the time one chunk is worth at the cap: a flow's bytes
// leave in pieces of about this much time, not in bursts of its buffer.
const bucketSlice = 20 * time.Millisecond

func newBucket(rate int64) *bucket {
	chunk := int(float64(rate) * bucketSlice.Seconds())
	chunk = max(4<<10, min(chunk, 256<<10))
	b := &bucket{rate: float64(rate), burst: float64(chunk), chunk: chunk, last: time.Now()}
	b.tokens = b.burst
	return b
}

// take accounts n bytes and waits until the bucket has paid for them.
func (b *bucket) take(n int) {
	b.mu.Lock()
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	b.tokens -= float64(n)
	var wait time.Duration
	if b.tokens < 0 {
		wait = time.Duration(-b.tokens / b.rate * float64(time.Second))
	}
	b.mu.Unlock()
	if wait > 0 {
		time.Sleep(wait)
	}
}

// copyCounted copies src to dst through buf, counting the bytes written
// and, with a bucket, holding them to its rate.
func copyCounted(dst io.Writer, src io.Reader, buf []byte, b *bucket, count func(int64)) {
	if b != nil && len(buf) > b.chunk {
		buf = buf[:b.chunk]
	}
	for {
		k, rerr := src.Read(buf)
		if k > 0 {
			if b != nil {
				b.take(k)
			}
			w, werr := dst.Write(buf[:k])
			count(int64(w))
			if werr != nil {
				return
			}
		}
		if rerr != nil {
			return
		}
	}
}
