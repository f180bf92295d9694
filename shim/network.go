package shim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	securejoin "github.com/cyphar/filepath-securejoin"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

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

// noneOnNetstack runs a docker-mode task on network "none" on gVisor's
// netstack (its --network=sandbox) in the task's new network namespace,
// which holds only a loopback: the guest sees what "none" gives it (lo
// alone, no route out), while gVisor's port forwarding, which serves only
// its netstack, reaches the guest, so dockerd is published through the
// shim (dockerProxied) and the sandbox can be checkpointed. gvx-hook
// brings that loopback up, as for "sandbox".
func (t *gvxTask) noneOnNetstack() error {
	hook, err := config.HookPath(t.rec.Sentry)
	if err != nil {
		return grpcError(errdefs.ErrFailedPrecondition, err)
	}
	t.hook = hook
	t.flags = setFlag(t.flags, "--network=", config.GVisorNetwork(api.NetworkSandbox))
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

// inlineResolvConf gives a NAT sandbox's guest its /etc/resolv.conf in
// the task's own root filesystem (mounted at rootfs by mountRootfs, a
// container's writable snapshot) instead of the bind mount oci.PrepareNAT
// added: one gofer-served mount fewer in gVisor's create and start
// (≈ 4 ms, docs/benchmarks.md). The file belongs to the sandbox's root,
// mode 0644. Where the image's /etc/resolv.conf is not a regular file
// (a symlink, e.g. to systemd-resolved's) or /etc is missing, the mount
// stays: nothing is written.
func (t *gvxTask) inlineResolvConf(ctx context.Context, rootfs string) error {
	if t.network != api.NetworkNAT || t.role == oci.RoleContainer {
		return nil
	}
	src := filepath.Join(t.rec.Bundle, oci.ResolvConfFile)
	i := slices.IndexFunc(t.spec.Mounts, func(m specs.Mount) bool {
		return m.Destination == "/etc/resolv.conf" && m.Source == src
	})
	if i < 0 {
		return nil
	}
	ok, err := writeResolvConf(rootfs, t.mapping)
	if err != nil || !ok {
		return err
	}
	t.spec.Mounts = slices.Delete(t.spec.Mounts, i, i+1)
	log.G(ctx).Debug("gvx shim: resolv.conf written into the root filesystem")
	return nil
}

// writeResolvConf writes oci.ResolvConf into rootfs's /etc/resolv.conf,
// owned by the sandbox's root, and says whether it could: false, with
// nothing changed, where /etc is not a directory of the rootfs or
// /etc/resolv.conf is there and not a regular file.
func writeResolvConf(rootfs string, m oci.Mapping) (bool, error) {
	etc, err := securejoin.SecureJoin(rootfs, "/etc")
	if err != nil {
		return false, fmt.Errorf("resolv.conf: %w", err)
	}
	if st, err := os.Lstat(etc); err != nil || !st.IsDir() {
		return false, nil
	}
	p := filepath.Join(etc, "resolv.conf")
	if st, err := os.Lstat(p); err == nil && !st.Mode().IsRegular() {
		return false, nil
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return false, fmt.Errorf("resolv.conf in the root filesystem: %w", err)
	}
	defer f.Close()
	if _, err := f.Write(oci.ResolvConf()); err != nil {
		return false, fmt.Errorf("write resolv.conf in the root filesystem: %w", err)
	}
	if err := f.Chown(int(m.HostUID), int(m.HostGID)); err != nil {
		return false, fmt.Errorf("chown resolv.conf in the root filesystem: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		return false, fmt.Errorf("chmod resolv.conf in the root filesystem: %w", err)
	}
	return true, f.Close()
}
