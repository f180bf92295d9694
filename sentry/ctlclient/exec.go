package ctlclient

import (
	"fmt"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Exec converts an OCI process into the exec's arguments, as gvx-sentry's
// own exec does (fastexec.ExecArgs): capabilities default to those of
// containerProc (the container's process; may be nil), and CAP_NET_RAW is
// dropped unless the sandbox runs with raw sockets (enableRaw).
func Exec(p, containerProc *specs.Process, enableRaw bool) (*ExecArgs, error) {
	switch {
	case p == nil || len(p.Args) == 0:
		return nil, fmt.Errorf("args must not be empty")
	case !strings.HasPrefix(p.Cwd, "/"):
		return nil, fmt.Errorf("cwd %q must be an absolute path", p.Cwd)
	}
	set := p.Capabilities
	if set == nil && containerProc != nil {
		set = containerProc.Capabilities
	}
	caps := &Capabilities{}
	if set != nil {
		for _, s := range []struct {
			names []string
			bits  *uint64
		}{
			{set.Bounding, &caps.BoundingCaps}, {set.Effective, &caps.EffectiveCaps}, {set.Inheritable, &caps.InheritableCaps},
			{set.Permitted, &caps.PermittedCaps}, {set.Ambient, &caps.AmbientCaps},
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
	}
	return &ExecArgs{
		Argv:             p.Args,
		Envv:             p.Env,
		WorkingDirectory: p.Cwd,
		KUID:             p.User.UID,
		KGID:             p.User.GID,
		ExtraKGIDs:       append([]uint32{}, p.User.AdditionalGids...),
		Capabilities:     caps,
		StdioIsPty:       p.Terminal,
		NoNewPrivileges:  p.NoNewPrivileges,
		SupportTTYs:      true,
	}, nil
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
