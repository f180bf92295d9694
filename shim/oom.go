package shim

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

var (
	lowerOOMOnce    sync.Once
	lowerOOMAllowed bool
)

// canLowerOOMScore reports whether this host allows negative OOM score
// adjustments (some refuse them even to root). It probes once by setting
// the shim's own score to -1 and restores it.
func canLowerOOMScore() bool {
	lowerOOMOnce.Do(func() {
		const p = "/proc/self/oom_score_adj"
		data, err := os.ReadFile(p)
		if err != nil {
			return
		}
		cur, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			return
		}
		if cur < 0 {
			lowerOOMAllowed = true
			return
		}
		if err := os.WriteFile(p, []byte("-1"), 0); err != nil {
			return
		}
		lowerOOMAllowed = true
		_ = os.WriteFile(p, []byte(strconv.Itoa(cur)), 0)
	})
	return lowerOOMAllowed
}

// clampOOMScore raises a negative oom_score_adj in the spec to 0 on hosts
// that refuse negative values (gVisor would otherwise fail the start with
// "permission denied"; CRI asks -998 for every pod's pause container).
func clampOOMScore(ctx context.Context, s *specs.Spec) {
	if s.Process == nil || s.Process.OOMScoreAdj == nil || *s.Process.OOMScoreAdj >= 0 || canLowerOOMScore() {
		return
	}
	log.G(ctx).Warnf("gvx shim: this host refuses negative OOM score adjustments; running with 0 instead of %d", *s.Process.OOMScoreAdj)
	zero := 0
	s.Process.OOMScoreAdj = &zero
}
