package compat

import (
	"bytes"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/arch"
	"gvisor.dev/gvisor/pkg/sentry/inet"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/pkg/sentry/socket/netlink/nlmsg"
)

// The bridge ioctls of linux/sockios.h, which brctl (busybox's, and
// bridge-utils') uses to add and delete bridges. gVisor's netstack creates
// bridges only through netlink (`ip link add NAME type bridge`).
const (
	siocBRADDBR = 0x89a0
	siocBRDELBR = 0x89a1
)

// bridgeIoctl serves SIOCBRADDBR and SIOCBRDELBR on a socket as Linux's
// br_ioctl_stub does, through the netlink operations gVisor's stack
// implements: CAP_NET_ADMIN in the network namespace's user namespace or
// EPERM; an existing name EEXIST; deleting a missing device ENXIO, a
// device that is not a bridge EPERM (gVisor's interfaces are always up, so
// Linux's EBUSY for a bridge that is up does not apply). Every other ioctl
// is fn's.
func bridgeIoctl(fn kernel.SyscallFn) kernel.SyscallFn {
	return func(t *kernel.Task, sysno uintptr, args arch.SyscallArguments) (uintptr, *kernel.SyscallControl, error) {
		cmd := args[1].Uint()
		if cmd != siocBRADDBR && cmd != siocBRDELBR {
			return fn(t, sysno, args)
		}
		isSocket, err := socketFD(t, args[0].Int())
		if err != nil {
			return 0, nil, err
		}
		ns := t.NetworkNamespace()
		if !isSocket || ns == nil || ns.Stack() == nil {
			return fn(t, sysno, args)
		}
		if !t.HasCapabilityIn(linux.CAP_NET_ADMIN, ns.UserNamespace()) {
			return 0, nil, linuxerr.EPERM
		}
		buf := make([]byte, linux.IFNAMSIZ-1)
		if _, err := t.CopyInBytes(args[2].Pointer(), buf); err != nil {
			return 0, nil, linuxerr.EFAULT
		}
		name := string(buf)
		if i := bytes.IndexByte(buf, 0); i >= 0 {
			name = string(buf[:i])
		}
		if name == "" || name == "." || name == ".." || bytes.ContainsAny([]byte(name), "/: \t\n") {
			return 0, nil, linuxerr.EINVAL
		}
		if cmd == siocBRADDBR {
			return 0, nil, addBridge(t, ns.Stack(), name)
		}
		return 0, nil, delBridge(t, ns.Stack(), name)
	}
}

// addBridge creates bridge name as RTM_NEWLINK (NLM_F_CREATE|NLM_F_EXCL,
// IFLA_IFNAME, IFLA_LINKINFO{IFLA_INFO_KIND "bridge"}) does.
func addBridge(t *kernel.Task, st inet.Stack, name string) error {
	for _, ifc := range st.Interfaces() {
		if ifc.Name == name {
			return linuxerr.EEXIST
		}
	}
	msg := nlmsg.NewMessage(linux.NetlinkMessageHeader{
		Type:  linux.RTM_NEWLINK,
		Flags: linux.NLM_F_REQUEST | linux.NLM_F_CREATE | linux.NLM_F_EXCL,
	})
	msg.Put(&linux.InterfaceInfoMessage{})
	msg.PutAttrString(linux.IFLA_IFNAME, name)
	var info nlmsg.NestedAttr
	info.PutAttrString(linux.IFLA_INFO_KIND, "bridge")
	msg.PutNestedAttr(linux.IFLA_LINKINFO, info)
	if err := st.SetInterface(t, msg); err != nil {
		return err.ToError()
	}
	return nil
}

// delBridge removes bridge name.
func delBridge(t *kernel.Task, st inet.Stack, name string) error {
	for idx, ifc := range st.Interfaces() {
		if ifc.Name != name {
			continue
		}
		if ifc.Kind != "bridge" {
			return linuxerr.EPERM
		}
		// Linux refuses (EBUSY) a bridge that is up; gVisor's netstack
		// keeps every interface up, so there is no down to ask for.
		return st.RemoveInterface(t, idx)
	}
	return linuxerr.ENXIO
}
