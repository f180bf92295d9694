package pool

import (
	"bufio"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gvxrun/gvx/internal/cgroups"
)

// demandWindow is how far back the claim rate looks.
const demandWindow = 10 * time.Second

// headroom multiplies the sandboxes claimed during one boot time: the
// pool aims to have that many ready so that a burst finds it full.
const headroom = 2

// noteClaim records a claim for the rate (s.mu held).
func (s *Server) noteClaim(t time.Time) {
	s.claims = append(s.claims, t)
	cut := 0
	for cut < len(s.claims) && t.Sub(s.claims[cut]) > demandWindow {
		cut++
	}
	s.claims = s.claims[cut:]
}

// claimRate is the claims per second over the demand window (s.mu held).
func (s *Server) claimRate(now time.Time) float64 {
	n := 0
	for _, c := range s.claims {
		if now.Sub(c) <= demandWindow {
			n++
		}
	}
	return float64(n) / demandWindow.Seconds()
}

// target is the depth the pool aims at (see targetLocked).
func (s *Server) target() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.targetLocked()
}

// targetLocked is the depth the pool aims at: pool.size, or, while claims
// come faster, the sandboxes claimed during headroom boot times, up to
// pool.max_size — and growing past pool.size only as far as the host's
// available memory (less a reserve) holds sandboxes of the size the ready
// ones have (s.mu held).
func (s *Server) targetLocked() int {
	size, top := s.cfg.Pool.Size, s.cfg.Pool.MaxSize
	if top <= size {
		return size
	}
	boot := s.bootTime
	if boot == 0 {
		boot = 200 * time.Millisecond
	}
	want := int(math.Ceil(s.claimRate(time.Now()) * boot.Seconds() * headroom))
	t := min(max(size, want), top)
	if t > size {
		have := len(s.ready) + s.booting
		if fit := have + int(spareMemory()/s.sandboxMemory()); t > fit {
			t = max(size, fit)
		}
	}
	return t
}

// sandboxMemory is what a ready sandbox uses (its cgroup's memory, the
// mean over the ready ones; 64 MiB until one can be read) (s.mu held).
func (s *Server) sandboxMemory() int64 {
	var sum, n int64
	for _, sb := range s.ready {
		if v := cgroupMemory(sb.Cgroup); v > 0 {
			sum += v
			n++
		}
		if n == 4 {
			break // a sample is enough
		}
	}
	if n == 0 {
		return 64 << 20
	}
	return sum / n
}

// cgroupMemory is the memory charged to the cgroup at path (v1 or v2).
func cgroupMemory(path string) int64 {
	v, err := cgroups.ReadMemory(path)
	if err != nil {
		return 0
	}
	return int64(v)
}

// spareMemory is the host's available memory less a reserve (a tenth of
// its memory, at least 1 GiB) kept for the sandboxes' own growth.
func spareMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	var total, avail int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "MemTotal:":
			total = v << 10
		case "MemAvailable:":
			avail = v << 10
		}
	}
	return max(avail-max(total/10, 1<<30), 0)
}
