package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The bridges subcommand (api.RelayBridgesCommand) makes dockerd's bridges
// again in a restored guest:
//
//	gvx-relay bridges NAME=GATEWAY/BITS...
//
// For each: a bridge device NAME (kept if there is one), the address
// GATEWAY/BITS on it, the device up, and a route to the subnet through
// it — what `ip link add NAME type bridge`, `ip addr add`, `ip link set
// up` and `ip route replace` do, through route netlink in this one
// process instead of a shell and five `ip` processes in the guest (each
// process start in gVisor costs tens of ms), and without needing `ip` in
// the image.

// bridge is one device bridges makes.
type bridge struct {
	name string
	addr netip.Prefix // the gateway's address, with the subnet's length
}

// parseBridges parses bridges' arguments.
func parseBridges(args []string) ([]bridge, error) {
	if len(args) == 0 {
		return nil, errors.New("no bridge: want NAME=GATEWAY/BITS...")
	}
	var out []bridge
	for _, a := range args {
		name, addr, ok := strings.Cut(a, "=")
		if !ok || name == "" || len(name) > unix.IFNAMSIZ-1 || strings.ContainsAny(name, "/ \t\n") {
			return nil, fmt.Errorf("bridge %q: want NAME=GATEWAY/BITS with a device name of at most %d characters", a, unix.IFNAMSIZ-1)
		}
		p, err := netip.ParsePrefix(addr)
		if err != nil {
			return nil, fmt.Errorf("bridge %q: %w", a, err)
		}
		out = append(out, bridge{name: name, addr: p})
	}
	return out, nil
}

// makeBridges makes each bridge.
func makeBridges(bridges []bridge) error {
	nl, err := dialNetlink()
	if err != nil {
		return err
	}
	defer nl.close()
	for _, b := range bridges {
		if err := nl.makeBridge(b); err != nil {
			return fmt.Errorf("bridge %s (%s): %w", b.name, b.addr, err)
		}
	}
	return nil
}

// makeBridge makes b: the device, its address, up, the subnet's route.
func (nl *netlink) makeBridge(b bridge) error {
	kind := attr(unix.IFLA_INFO_KIND, []byte("bridge"))
	link := append(ifinfomsg(0, 0, 0), attr(unix.IFLA_IFNAME, append([]byte(b.name), 0))...)
	link = append(link, attr(unix.IFLA_LINKINFO, kind)...)
	if err := nl.request(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL, link); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add the device: %w", err)
	}
	ifc, err := net.InterfaceByName(b.name)
	if err != nil {
		return fmt.Errorf("find the device: %w", err)
	}
	idx := uint32(ifc.Index)
	family, ip := uint8(unix.AF_INET), b.addr.Addr().AsSlice()
	if b.addr.Addr().Is6() {
		family = unix.AF_INET6
	}
	addr := ifaddrmsg(family, uint8(b.addr.Bits()), idx)
	addr = append(addr, attr(unix.IFA_LOCAL, ip)...)
	addr = append(addr, attr(unix.IFA_ADDRESS, ip)...)
	if err := nl.request(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, addr); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add the address: %w", err)
	}
	if err := nl.request(unix.RTM_NEWLINK, 0, ifinfomsg(idx, unix.IFF_UP, unix.IFF_UP)); err != nil {
		return fmt.Errorf("set the device up: %w", err)
	}
	dst := b.addr.Masked()
	route := rtmsg(family, uint8(dst.Bits()))
	route = append(route, attr(unix.RTA_DST, dst.Addr().AsSlice())...)
	route = append(route, attr(unix.RTA_OIF, binary.NativeEndian.AppendUint32(nil, idx))...)
	if err := nl.request(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, route); err != nil {
		return fmt.Errorf("route %s: %w", dst, err)
	}
	return nil
}

// netlink is a route netlink socket.
type netlink struct {
	fd  int
	seq uint32
}

func dialNetlink() (*netlink, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("route netlink: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("route netlink: %w", err)
	}
	return &netlink{fd: fd}, nil
}

func (nl *netlink) close() { unix.Close(nl.fd) }

// request sends one request of type typ with flags and body, and returns
// the kernel's answer to it (nil, or its errno).
func (nl *netlink) request(typ, flags uint16, body []byte) error {
	nl.seq++
	msg := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(unix.NLMSG_HDRLEN+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], flags|unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:], nl.seq)
	msg = append(msg, body...)
	if err := unix.Sendto(nl.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(nl.fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("netlink answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != nl.seq || m.Header.Type != unix.NLMSG_ERROR {
				continue
			}
			if len(m.Data) < 4 {
				return errors.New("netlink answer: short error message")
			}
			if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
				return unix.Errno(-errno)
			}
			return nil
		}
	}
}

// attr is a netlink attribute of type typ holding data, padded.
func attr(typ uint16, data []byte) []byte {
	n := unix.SizeofRtAttr + len(data)
	b := make([]byte, 4, nlAlign(n))
	binary.NativeEndian.PutUint16(b[0:], uint16(n))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, data...)
	return append(b, make([]byte, nlAlign(n)-n)...)
}

func nlAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// ifinfomsg is a struct ifinfomsg for device index (0: by name) with
// flags and the flags to change.
func ifinfomsg(index, flags, change uint32) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	b[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(b[4:], index)
	binary.NativeEndian.PutUint32(b[8:], flags)
	binary.NativeEndian.PutUint32(b[12:], change)
	return b
}

// ifaddrmsg is a struct ifaddrmsg for an address of family with prefix
// length bits on device index.
func ifaddrmsg(family, bits uint8, index uint32) []byte {
	b := make([]byte, unix.SizeofIfAddrmsg)
	b[0], b[1], b[3] = family, bits, unix.RT_SCOPE_UNIVERSE
	binary.NativeEndian.PutUint32(b[4:], index)
	return b
}

// rtmsg is a struct rtmsg for a route of the main table to a destination
// of family and prefix length bits on a link (no gateway).
func rtmsg(family, bits uint8) []byte {
	b := make([]byte, unix.SizeofRtMsg)
	b[0], b[1] = family, bits
	b[4], b[5], b[6], b[7] = unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_LINK, unix.RTN_UNICAST
	return b
}
