package prefilter

import (
	"slices"
	"strings"
)

// WantSentry reports whether gen keeps the Sentry's program for gVisor's
// configuration key: the systrap platform (gvx's), no GPU, TPU or RDMA
// proxy, no cgo.
func WantSentry(key string) bool {
	return hasAll(key, `Platform="systrap"`, "NVProxy=false", "TPUProxy=false", "RDMAProxy=false", "CgoEnabled=false", "ProfileEnable=false")
}

// WantGofer reports whether gen keeps the gofer's program for key: every
// variant without cgo.
func WantGofer(key string) bool {
	return hasAll(key, "CgoEnabled=false", "ProfileEnabled=false")
}

// hasAll reports whether every one of fields is a field of key.
func hasAll(key string, fields ...string) bool {
	have := strings.Fields(key)
	for _, f := range fields {
		if !slices.Contains(have, f) {
			return false
		}
	}
	return true
}
