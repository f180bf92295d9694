package oci

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// appliedSysctls are the sysctls outside net.* that gVisor applies from a
// spec's linux.sysctl (runsc's loader reads fs.nr_open; every other key it
// ignores).
var appliedSysctls = map[string]bool{"fs.nr_open": true}

// validateSysctls refuses a sysctl the sandbox would silently not have:
// gVisor's kernel keeps its own /proc/sys, and kernel.* (SysV IPC limits,
// kernel.shm_rmid_forced) and fs.* (fs.mqueue.msg_max, …) keys other than
// fs.nr_open are neither applied nor implemented there. net.* keys are
// let through, unapplied, as before: containerd's CRI sets
// net.ipv4.ip_unprivileged_port_start and net.ipv4.ping_group_range on
// every pod, and gVisor's netstack keeps its own settings
// (docs/compatibility.md).
func validateSysctls(sysctls map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(sysctls)) {
		if strings.HasPrefix(k, "net.") || appliedSysctls[k] {
			continue
		}
		return fmt.Errorf("invalid OCI spec: sysctl %s=%s is not supported: gVisor's kernel does not implement it, so the sandbox would run without it; "+
			"remove it from the pod's securityContext.sysctls (docker/nerdctl: --sysctl), or run this workload with runc", k, sysctls[k])
	}
	return nil
}
