package oci

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
)

// cgroupV2 reports whether the host's cgroups are unified (v2); a variable
// for tests.
var cgroupV2 = func() bool { return cgroups.Mode() == cgroups.Unified }

// applyQuotas sets the sandbox's memory reclaim threshold and its guest
// pids limit (docs/operations.md#quotas):
//   - memory: with a memory limit, cgroup v2 memory.high (v1: the soft
//     limit, memory.soft_limit_in_bytes) at dev.gvx.memory-high, else
//     the config's memory_high_percent of the limit; the hard limit stays;
//   - pids: the spec's pids limit (else the config's resources.pids) is
//     the guest's, enforced inside by gvx-sentry (dev.gvx.pids-limit); the
//     host cgroup gets api.HostPidsLimit of it as a backstop.
func applyQuotas(s *specs.Spec, r config.Resources) error {
	res := s.Linux.Resources
	if res == nil {
		res = &specs.LinuxResources{}
	}
	if res.Memory != nil && res.Memory.Limit != nil && *res.Memory.Limit > 0 {
		high, err := memoryHigh(s.Annotations[api.AnnotationMemoryHigh], *res.Memory.Limit, r.MemoryHighPercent)
		if err != nil {
			return err
		}
		if high > 0 && high < *res.Memory.Limit {
			if cgroupV2() {
				if res.Unified == nil {
					res.Unified = map[string]string{}
				}
				if _, ok := res.Unified["memory.high"]; !ok {
					res.Unified["memory.high"] = strconv.FormatInt(high, 10)
				}
			} else if res.Memory.Reservation == nil || *res.Memory.Reservation <= 0 {
				res.Memory.Reservation = &high
			}
		}
	}
	guest := r.Pids
	if res.Pids != nil && res.Pids.Limit != nil && *res.Pids.Limit > 0 {
		guest = *res.Pids.Limit
	}
	if v, ok := s.Annotations[api.AnnotationPidsLimit]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("invalid OCI spec: annotation %s=%q: want a number of tasks (0: no limit)", api.AnnotationPidsLimit, v)
		}
		if n > 0 {
			guest = n
		}
	}
	if guest > 0 {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[api.AnnotationPidsLimit] = strconv.FormatInt(guest, 10)
		host := api.HostPidsLimit(guest)
		res.Pids = &specs.LinuxPids{Limit: &host}
		s.Linux.Resources = res
	}
	return nil
}

// memoryHigh is the reclaim threshold for a memory limit: the annotation's
// value (bytes or a percentage of limit, "0": none), else pct of limit.
func memoryHigh(v string, limit int64, pct int) (int64, error) {
	if v == "" {
		if pct <= 0 || pct >= 100 {
			return 0, nil
		}
		return limit / 100 * int64(pct), nil
	}
	if p, ok := strings.CutSuffix(v, "%"); ok {
		n, err := strconv.ParseFloat(p, 64)
		if err != nil || n < 0 || n > 100 {
			return 0, fmt.Errorf("invalid OCI spec: annotation %s=%q: want bytes (e.g. 768Mi) or a percentage of the memory limit (e.g. 90%%)", api.AnnotationMemoryHigh, v)
		}
		return int64(float64(limit) * n / 100), nil
	}
	n, err := ParseSize(v)
	if err != nil {
		return 0, fmt.Errorf("invalid OCI spec: annotation %s: %w", api.AnnotationMemoryHigh, err)
	}
	return n, nil
}

// RootfsSize is the cap on the task's root filesystem writes: its
// dev.gvx.rootfs-size annotation, else the config's default (0: none).
func RootfsSize(s *specs.Spec, def int64) (int64, error) {
	v, ok := s.Annotations[api.AnnotationRootfsSize]
	if !ok {
		return def, nil
	}
	n, err := ParseSize(v)
	if err != nil {
		return 0, fmt.Errorf("invalid OCI spec: annotation %s: %w", api.AnnotationRootfsSize, err)
	}
	return n, nil
}

// ParseSize reads a size in bytes: a number with an optional binary
// suffix K, M, G, T (or Ki, Mi, Gi, Ti; all powers of 1024).
func ParseSize(v string) (int64, error) {
	num := strings.TrimSuffix(strings.TrimSpace(v), "i")
	shift := 0
	if num != "" {
		switch num[len(num)-1] {
		case 'K', 'k':
			shift = 10
		case 'M', 'm':
			shift = 20
		case 'G', 'g':
			shift = 30
		case 'T', 't':
			shift = 40
		}
	}
	if shift > 0 {
		num = num[:len(num)-1]
	} else if num != strings.TrimSpace(v) {
		num = "" // a lone "i"
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("size %q: want bytes, optionally with a K, M, G or T suffix (powers of 1024), e.g. 512Mi", v)
	}
	return n << shift, nil
}
