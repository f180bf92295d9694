package ctlsock

import "fmt"

// CapabilityNames are a process's capability sets by their OCI names
// (CAP_CHOWN, …), as an OCI spec's process holds them.
type CapabilityNames struct {
	Bounding, Effective, Inheritable, Permitted, Ambient []string
}

// CapabilitySets converts names into gVisor's bit sets. CAP_NET_RAW is
// dropped unless the sandbox runs with raw sockets (enableRaw), as gVisor
// does for a container's process and an exec; an unknown name is an
// error.
func CapabilitySets(names CapabilityNames, enableRaw bool) (*Capabilities, error) {
	caps := &Capabilities{}
	for _, s := range []struct {
		names []string
		bits  *uint64
	}{
		{names.Bounding, &caps.BoundingCaps}, {names.Effective, &caps.EffectiveCaps}, {names.Inheritable, &caps.InheritableCaps},
		{names.Permitted, &caps.PermittedCaps}, {names.Ambient, &caps.AmbientCaps},
	} {
		for _, name := range s.names {
			bit, ok := capabilities[name]
			if !ok {
				return nil, fmt.Errorf("capabilities: unknown capability %q", name)
			}
			if name == "CAP_NET_RAW" && !enableRaw {
				continue
			}
			*s.bits |= 1 << bit
		}
	}
	return caps, nil
}

// capabilities are Linux's capability numbers by their OCI names
// (linux/capability.h).
var capabilities = map[string]uint{
	"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3, "CAP_FSETID": 4,
	"CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8, "CAP_LINUX_IMMUTABLE": 9,
	"CAP_NET_BIND_SERVICE": 10, "CAP_NET_BROADCAST": 11, "CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13,
	"CAP_IPC_LOCK": 14, "CAP_IPC_OWNER": 15, "CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17,
	"CAP_SYS_CHROOT": 18, "CAP_SYS_PTRACE": 19, "CAP_SYS_PACCT": 20, "CAP_SYS_ADMIN": 21,
	"CAP_SYS_BOOT": 22, "CAP_SYS_NICE": 23, "CAP_SYS_RESOURCE": 24, "CAP_SYS_TIME": 25,
	"CAP_SYS_TTY_CONFIG": 26, "CAP_MKNOD": 27, "CAP_LEASE": 28, "CAP_AUDIT_WRITE": 29,
	"CAP_AUDIT_CONTROL": 30, "CAP_SETFCAP": 31, "CAP_MAC_OVERRIDE": 32, "CAP_MAC_ADMIN": 33,
	"CAP_SYSLOG": 34, "CAP_WAKE_ALARM": 35, "CAP_BLOCK_SUSPEND": 36, "CAP_AUDIT_READ": 37,
	"CAP_PERFMON": 38, "CAP_BPF": 39, "CAP_CHECKPOINT_RESTORE": 40,
}

// KnownCapabilities lists the capability names CapabilitySets takes.
func KnownCapabilities() []string {
	names := make([]string, 0, len(capabilities))
	for name := range capabilities {
		names = append(names, name)
	}
	return names
}
