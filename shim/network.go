package shim

import (
	"strings"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/oci"
)

// prepareNetwork resolves the task's network mode (its annotation over
// the config's), sets gVisor's --network for it and, for a NAT sandbox,
// its NAT (a pod's application container shares its pod's network).
func (t *gvxTask) prepareNetwork() error {
	var err error
	if t.network, err = oci.NetworkMode(t.spec, t.cfg); err != nil {
		return err
	}
	if t.network != t.cfg.Network {
		t.flags = setFlag(t.flags, "--network=", config.GVisorNetwork(t.network))
	}
	if t.network == api.NetworkNAT && t.role != oci.RoleContainer {
		return t.prepareNAT()
	}
	return nil
}

// prepareNAT gives the task's sandbox gvx's userspace NAT: the merged,
// checked NAT settings on the spec for gvx-sentry (oci.PrepareNAT), and
// its published unix sockets in the record, which removes them at
// release.
func (t *gvxTask) prepareNAT() error {
	n, err := oci.PrepareNAT(t.spec, t.cfg.NAT, t.rec.Bundle)
	if err != nil {
		return err
	}
	for _, o := range n.Owner {
		t.rec.Sockets = append(t.rec.Sockets, o.Path)
	}
	return t.rec.save()
}

// setFlag replaces the flag with prefix (e.g. "--network=") in flags by
// prefix+value.
func setFlag(flags []string, prefix, value string) []string {
	out := make([]string, 0, len(flags)+1)
	for _, f := range flags {
		if !strings.HasPrefix(f, prefix) {
			out = append(out, f)
		}
	}
	return append(out, prefix+value)
}
