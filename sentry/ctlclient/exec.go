package ctlclient

import (
	"fmt"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api/ctlsock"
)

// Exec converts an OCI process into the exec's arguments, as gvx-sentry's
// own exec does (fastexec.ExecArgs): capabilities default to those of
// containerProc (the container's process; may be nil), and CAP_NET_RAW is
// dropped unless the sandbox runs with raw sockets (enableRaw).
func Exec(p, containerProc *specs.Process, enableRaw bool) (*ctlsock.ExecArgs, error) {
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
	caps := &ctlsock.Capabilities{}
	if set != nil {
		var err error
		if caps, err = ctlsock.CapabilitySets(ctlsock.CapabilityNames{Bounding: set.Bounding, Effective: set.Effective,
			Inheritable: set.Inheritable, Permitted: set.Permitted, Ambient: set.Ambient}, enableRaw); err != nil {
			return nil, err
		}
	}
	return &ctlsock.ExecArgs{
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
