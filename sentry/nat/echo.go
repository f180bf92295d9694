package nat

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"

	"github.com/gvxrun/gvx/api"
)

// The guest's echo requests to addresses other than the NAT's own go out
// through the host's unprivileged ICMP sockets ("ping sockets": a datagram
// socket of protocol ICMP, which the kernel lets a process open when its
// group is in net.ipv4.ping_group_range), one per guest echo session (its
// source, destination and identifier), under the egress policy (rules
// with a port never match an echo) and the flow cap. The kernel gives the
// host socket's echoes an identifier of its own; each reply goes back to
// the guest with the guest's identifier, from the address pinged. A host
// that does not allow ping sockets, or a refusal by the policy, gets the
// guest an ICMP "communication administratively prohibited" from the
// gateway at once.

// echoIdle ends an echo session no request or reply went through for this
// long.
const echoIdle = 10 * time.Second

// EchoOpener opens a host ICMP echo socket (OpenEcho's kind).
type EchoOpener func() (net.PacketConn, error)

// OpenEcho opens an unprivileged ICMP echo socket of the host, IPv4.
func OpenEcho() (net.PacketConn, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_ICMP)
	if err != nil {
		return nil, fmt.Errorf("icmp echo socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "icmp-echo")
	defer f.Close()
	c, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("icmp echo socket: %w", err)
	}
	return c, nil
}

// echoKey is one guest echo session.
type echoKey struct {
	src, dst netip.Addr
	ident    uint16
}

// echoes are the NAT's echo sessions.
type echoes struct {
	open     EchoOpener
	mu       sync.Mutex
	sessions map[echoKey]*echoSession
	closed   bool
	warned   atomic.Bool // the host refused a ping socket once (logged)
}

type echoSession struct {
	conn net.PacketConn
	last atomic.Int64 // unix nanoseconds of the last request or reply
}

// forwardEcho sends the guest's echo request req to the host, or answers
// it with a refusal.
func (n *NAT) forwardEcho(req *echoRequest) {
	dst := req.dst
	to := netip.AddrPortFrom(dst, 0)
	if d := n.policy.Decide(dst, 0); !d.Allow {
		n.refuse("icmp echo", to, d.Reason)
		n.prohibited(req.datagram)
		return
	}
	k := echoKey{src: req.src, dst: dst, ident: req.icmp.Ident()}
	s, err := n.echoSession(k)
	if err != nil {
		if n.echo.warned.CompareAndSwap(false, true) {
			log.Warningf("nat: echo requests cannot leave this host (%v): the host's net.ipv4.ping_group_range must hold the sandbox's group %d; each is refused", err, os.Getgid())
		}
		n.refuse("icmp echo", to, "the host allows no ping socket")
		n.prohibited(req.datagram)
		return
	}
	if s == nil {
		// Over max_connections: refused and counted by admit.
		n.prohibited(req.datagram)
		return
	}
	// The kernel fills in the identifier (the socket's) and the checksum.
	s.last.Store(time.Now().UnixNano())
	if _, err := s.conn.WriteTo(req.icmp, &net.UDPAddr{IP: dst.AsSlice()}); err != nil {
		log.Debugf("nat: icmp echo to %s: %v", dst, err)
		return
	}
	n.stats.bytesOut(int64(len(req.icmp)))
}

// echoSession is session k, opened (with its reader) if it is new; nil
// without error when the flow cap refused it.
func (n *NAT) echoSession(k echoKey) (*echoSession, error) {
	e := &n.echo
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errors.New("the NAT is closed")
	}
	if s := e.sessions[k]; s != nil {
		return s, nil
	}
	if !n.admit("icmp echo", netip.AddrPortFrom(k.dst, 0)) {
		return nil, nil
	}
	conn, err := e.open()
	if err != nil {
		n.done()
		return nil, err
	}
	n.stats.add(func(s *api.NATStats) { s.Allowed++; s.HostSockets++ })
	s := &echoSession{conn: conn}
	s.last.Store(time.Now().UnixNano())
	if e.sessions == nil {
		e.sessions = map[echoKey]*echoSession{}
	}
	e.sessions[k] = s
	go n.echoReplies(k, s)
	return s, nil
}

// echoReplies hands session k's replies to the guest until it has been
// idle for echoIdle or the NAT closes.
func (n *NAT) echoReplies(k echoKey, s *echoSession) {
	defer func() {
		n.echo.mu.Lock()
		if n.echo.sessions[k] == s {
			delete(n.echo.sessions, k)
		}
		n.echo.mu.Unlock()
		s.conn.Close()
		n.done()
	}()
	buf := make([]byte, 65536)
	for {
		_ = s.conn.SetReadDeadline(time.Unix(0, s.last.Load()).Add(echoIdle))
		m, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, s.last.Load())) < echoIdle {
				continue
			}
			return
		}
		ua, ok := from.(*net.UDPAddr)
		if !ok || m < header.ICMPv4MinimumSize || header.ICMPv4(buf[:m]).Type() != header.ICMPv4EchoReply {
			continue
		}
		if a, _ := netip.AddrFromSlice(ua.IP); a.Unmap() != k.dst {
			continue
		}
		s.last.Store(time.Now().UnixNano())
		// Rewritten in place: icmpToGuest copies it into the datagram.
		reply := header.ICMPv4(buf[:m])
		reply.SetIdent(k.ident)
		reply.SetChecksum(0)
		reply.SetChecksum(^checksum.Checksum(reply, 0))
		n.icmpToGuest(k.dst, k.src, reply)
		n.stats.bytesIn(int64(m))
	}
}

// prohibited answers the guest's packet req (its IPv4 datagram) with an
// ICMP destination unreachable, communication administratively
// prohibited, from the gateway.
func (n *NAT) prohibited(req []byte) {
	ip := header.IPv4(req)
	quote := req
	if max := int(ip.HeaderLength()) + 8; len(quote) > max {
		quote = quote[:max]
	}
	msg := header.ICMPv4(make([]byte, header.ICMPv4MinimumSize+len(quote)))
	msg.SetType(header.ICMPv4DstUnreachable)
	msg.SetCode(header.ICMPv4AdminProhibited)
	copy(msg[header.ICMPv4MinimumSize:], quote)
	msg.SetChecksum(^checksum.Checksum(msg, 0))
	src := netip.AddrFrom4(ip.SourceAddress().As4())
	n.icmpToGuest(api.NATGateway, src, msg)
}

// echoID numbers the IPv4 datagrams icmpToGuest sends.
var echoID atomic.Uint32

// icmpToGuest sends ICMP message msg from address from to the guest's to.
func (n *NAT) icmpToGuest(from, to netip.Addr, msg header.ICMPv4) {
	b := make([]byte, header.IPv4MinimumSize+len(msg))
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(len(b)),
		ID:          uint16(echoID.Add(1)),
		TTL:         64,
		Protocol:    uint8(header.ICMPv4ProtocolNumber),
		SrcAddr:     tcpip.AddrFrom4(from.As4()),
		DstAddr:     tcpip.AddrFrom4(to.As4()),
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	copy(b[header.IPv4MinimumSize:], msg)
	if e := n.stack.WriteRawPacket(nicID, ipv4.ProtocolNumber, buffer.MakeWithData(b)); e != nil {
		log.Debugf("nat: icmp to the guest: %s", e)
	}
}

// closeEchoes ends every echo session (their readers return).
func (n *NAT) closeEchoes() {
	n.echo.mu.Lock()
	defer n.echo.mu.Unlock()
	n.echo.closed = true
	for _, s := range n.echo.sessions {
		s.conn.Close()
	}
}
