package oci

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
)

// ResolvConfFile is the NAT sandbox's /etc/resolv.conf, written in the
// bundle.
const ResolvConfFile = "gvx-resolv.conf"

// ResolvConf is the NAT sandbox's /etc/resolv.conf: the NAT's DNS.
func ResolvConf() []byte { return []byte("nameserver " + api.NATDNS.String() + "\n") }

// NetworkMode is the task's network mode: its api.AnnotationNetwork, else
// the config's. A task on the host's network (its spec has no network
// namespace: `ctr run --net-host`, a CRI pod with hostNetwork) asking for
// "sandbox" gets "host": gVisor's netstack would otherwise copy the
// host's interfaces and addresses and read the host's links with packet
// sockets, and the task's listeners would not be the host's (what
// kubelet, `crictl port-forward` and the task's users expect of the host
// network). "none" and "nat" stay as asked: neither touches the host's
// interfaces.
func NetworkMode(s *specs.Spec, c config.Config) (string, error) {
	v, ok := s.Annotations[api.AnnotationNetwork]
	if !ok {
		v = c.Network
	} else if err := config.CheckNetwork(v); err != nil {
		return "", fmt.Errorf("annotation %s: %w", api.AnnotationNetwork, err)
	}
	if v == api.NetworkSandbox && !OwnNetNS(s) {
		return api.NetworkHost, nil
	}
	return v, nil
}

// OwnNetNS reports whether s gives the task a network namespace other
// than the host's (a new one, or one it joins by path).
func OwnNetNS(s *specs.Spec) bool {
	return netNS(s) != nil
}

// FreshNetNS reports whether s gives the task a new network namespace
// (one the runtime creates, holding only a loopback), not one it joins by
// path.
func FreshNetNS(s *specs.Spec) bool {
	ns := netNS(s)
	return ns != nil && ns.Path == ""
}

// netNS is s's network namespace entry, nil if it has none (the host's).
func netNS(s *specs.Spec) *specs.LinuxNamespace {
	if s.Linux == nil {
		return nil
	}
	for i, ns := range s.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			return &s.Linux.Namespaces[i]
		}
	}
	return nil
}

// PrepareNAT merges the task's api.AnnotationNAT over the config's [nat]
// (each field set replaces the config's; an egress with only a narrowing
// narrows the config's policy),
// checks every mapping and rule, resolves the owner of each published
// unix socket (the owner of its directory, which must exist), writes the
// merged NAT back into the annotation for gvx-sentry and points the
// guest's /etc/resolv.conf at the NAT's DNS (a file in bundle). It returns
// the NAT.
func PrepareNAT(s *specs.Spec, c config.NAT, bundle string) (api.NAT, error) {
	n := c.API()
	if v, ok := s.Annotations[api.AnnotationNAT]; ok {
		over, err := api.DecodeNAT(v)
		if err != nil {
			return api.NAT{}, err
		}
		if over.Ports != nil {
			n.Ports = over.Ports
		}
		if e := over.Egress; e != nil {
			if e.HasPolicy() || n.Egress == nil {
				n.Egress = e
			} else {
				// A narrowing alone narrows the config's policy.
				merged := *n.Egress
				merged.Narrow = e.Narrow
				n.Egress = &merged
			}
		}
		if over.DNS != nil {
			n.DNS = over.DNS
		}
		if over.MaxConnections != 0 {
			n.MaxConnections = over.MaxConnections
		}
		if over.Bandwidth != 0 {
			n.Bandwidth = over.Bandwidth
		}
	}
	if err := n.Check(); err != nil {
		return api.NAT{}, err
	}
	n.Owner = nil
	for _, ps := range n.Ports {
		p, _ := api.ParsePort(ps)
		if p.Unix == "" {
			continue
		}
		o, err := socketOwner(p.Unix)
		if err != nil {
			return api.NAT{}, fmt.Errorf("port %q: %w", ps, err)
		}
		n.Owner = append(n.Owner, o)
	}
	enc, err := api.EncodeNAT(n)
	if err != nil {
		return api.NAT{}, err
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[api.AnnotationNAT] = enc
	resolv := filepath.Join(bundle, ResolvConfFile)
	if err := os.WriteFile(resolv, ResolvConf(), 0o644); err != nil {
		return api.NAT{}, fmt.Errorf("nat resolv.conf: %w", err)
	}
	mounts := s.Mounts[:0]
	for _, m := range s.Mounts {
		if m.Destination != "/etc/resolv.conf" {
			mounts = append(mounts, m)
		}
	}
	s.Mounts = append(mounts, specs.Mount{Destination: "/etc/resolv.conf", Type: "bind", Source: resolv, Options: []string{"rbind", "ro"}})
	return n, nil
}

// DefaultNAT is the NAT annotation PrepareNAT gives a spec that sets
// none of its own: the config's settings, as a warm pool's NAT sandboxes
// get them.
func DefaultNAT(c config.NAT) (string, error) {
	n := c.API()
	if err := n.Check(); err != nil {
		return "", err
	}
	n.Owner = nil
	return api.EncodeNAT(n)
}

// socketOwner is who a published unix socket at path belongs to: the
// owner of its directory, who must be able to write there; path itself
// must not exist.
func socketOwner(path string) (api.Owner, error) {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return api.Owner{}, fmt.Errorf("the socket's directory: %w; create it first", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok {
		return api.Owner{}, fmt.Errorf("%s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o200 == 0 {
		return api.Owner{}, fmt.Errorf("%s is not writable by its owner (uid %d), who would own the socket", dir, st.Uid)
	}
	if _, err := os.Lstat(path); err == nil {
		return api.Owner{}, fmt.Errorf("%s already exists: remove it or publish on another path", path)
	}
	return api.Owner{Path: path, UID: int(st.Uid), GID: int(st.Gid)}, nil
}
