// Package nat is a NAT sandbox's userspace network: a second gVisor
// netstack on the far end of the Sentry's eth0.
//
// The Sentry's NIC is an fd-based link on one end of a unix datagram
// socketpair (one IP packet per datagram); the NAT process holds the other
// end. Its stack owns 10.0.2.2 (the gateway, mapped to the host's
// loopback when the policy allows) and 10.0.2.3 (DNS), and in promiscuous
// mode terminates every TCP and UDP flow the guest opens: each is asked
// of the egress policy first, then relayed over an ordinary host socket
// (egress.go). Its DNS server (UDP and TCP on 10.0.2.3:53) forwards to
// the configured resolvers and teaches the policy which names map to
// which addresses (dns.go).
// Published ports accept on host sockets and dial into the guest
// (publish.go). The process runs with the sandbox's host credentials and
// exits when the sandbox's process does.
package nat

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/nat/policy"
)

const nicID = 1

// Dialer opens the host sockets of allowed flows; tests replace it.
type Dialer func(ctx context.Context, network, address string) (net.Conn, error)

// NAT is one sandbox's running NAT.
type NAT struct {
	stack    *stack.Stack
	policy   *policy.Policy
	dns      []string
	dial     Dialer
	stats    *Stats
	lim      *limits
	mu       sync.Mutex
	closers  []func()
	closedCh chan struct{}
	flows    atomic.Int64 // TCP flows being relayed (egress and published)
	idle     *time.Timer  // releaseMemory once no flow is left; under mu
	echo     echoes       // echo sessions to the host (echo.go)
}

// Options configure New.
type Options struct {
	// LinkFD is the NAT's end of the socketpair whose other end is the
	// guest's eth0. The caller keeps it: the NAT stops reading it when
	// Close returns, and only then may it be closed (a reader still
	// running would read whatever file is given that number next).
	LinkFD int
	// Config is the sandbox's NAT settings.
	Config api.NAT
	// Listeners are the host sockets of Config.Ports, in order, bound by
	// the privileged parent (Listen).
	Listeners []*os.File
	// Control, if set, is the listening socket (ListenControl) on which
	// root changes the policy's narrowing while the NAT runs
	// (api.NATControl).
	Control *os.File
	// Stats receives the counters.
	Stats *Stats
	// Dial opens host sockets; nil is net.Dialer's.
	Dial Dialer
	// MTU of the link; 0 is api.NATMTU (the guest's eth0 has the same).
	MTU uint32
	// Echo opens the host sockets of the guest's echo requests; nil is
	// OpenEcho.
	Echo EchoOpener
}

// New starts the NAT's stack and its forwarders and listeners.
func New(o Options) (*NAT, error) {
	pol, err := policy.New(o.Config.Egress)
	if err != nil {
		return nil, err
	}
	dns := o.Config.DNS
	if len(dns) == 0 {
		// No resolver is no reason to fail the sandbox: 10.0.2.3 then
		// answers nothing, and says why in the log.
		if dns, err = hostResolvers("/etc/resolv.conf"); err != nil {
			log.Warningf("%v", err)
		}
	}
	if o.Dial == nil {
		d := &net.Dialer{Timeout: 10 * time.Second}
		o.Dial = d.DialContext
	}
	if o.Stats == nil {
		o.Stats = &Stats{}
	}
	if o.Echo == nil {
		o.Echo = OpenEcho
	}
	n := &NAT{policy: pol, dns: dns, dial: o.Dial, stats: o.Stats, lim: newLimits(o.Config), closedCh: make(chan struct{}), echo: echoes{open: o.Echo}}
	if o.MTU == 0 {
		o.MTU = api.NATMTU
	}
	if err := n.startStack(o.LinkFD, o.MTU); err != nil {
		return nil, err
	}
	if err := n.publish(o.Config.Ports, o.Listeners); err != nil {
		n.Close()
		return nil, err
	}
	if o.Control != nil {
		if err := n.serveControl(o.Control); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

func (n *NAT) startStack(fd int, mtu uint32) error {
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4},
	})
	n.stack = s
	ep, err := fdbased.New(&fdbased.Options{
		FDs: []int{fd},
		MTU: mtu,
		// One packet per read: recvmmsg's batch keeps 8 receive
		// buffers of an MTU each (8 × 64 KiB at MTU 65520) filled
		// and dirty once traffic passed, for no measurable gain at
		// this packet size (docs/benchmarks.md, NAT memory).
		PacketDispatchMode: fdbased.Readv,
		// Both ends are gVisor stacks in processes of one host: no
		// wire to corrupt a packet.
		TXChecksumOffload: true,
		RXChecksumOffload: true,
	})
	if err != nil {
		return fmt.Errorf("nat link: %w", err)
	}
	if e := s.CreateNIC(nicID, newEchoFilter(ep, n.forwardEcho)); e != nil {
		return fmt.Errorf("nat nic: %s", e)
	}
	for _, a := range []netip.Addr{api.NATGateway, api.NATDNS} {
		pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddressWithPrefix{
			Address: tcpip.AddrFrom4(a.As4()), PrefixLen: api.NATPrefix.Bits()}}
		if e := s.AddProtocolAddress(nicID, pa, stack.AddressProperties{}); e != nil {
			return fmt.Errorf("nat address %s: %s", a, e)
		}
	}
	// Terminate flows to any address, and answer from it.
	if e := s.SetPromiscuousMode(nicID, true); e != nil {
		return fmt.Errorf("nat promiscuous: %s", e)
	}
	if e := s.SetSpoofing(nicID, true); e != nil {
		return fmt.Errorf("nat spoofing: %s", e)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: nicID}})
	// The Sentry's TCP settings (runsc/boot): SACK, receive buffer
	// auto-tuning, buffers up to what a fast local link needs.
	sack := tcpip.TCPSACKEnabled(true)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	moderate := tcpip.TCPModerateReceiveBufferOption(true)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &moderate)
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4 << 10, Default: 1 << 20, Max: 8 << 20}
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &rcv)
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: 4 << 10, Default: 1 << 20, Max: 8 << 20}
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &snd)
	tf := tcp.NewForwarder(s, 0, 1024, n.forwardTCP)
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, tf.HandlePacket)
	uf := udp.NewForwarder(s, n.forwardUDP)
	s.SetTransportProtocolHandler(udp.ProtocolNumber, uf.HandlePacket)
	return nil
}

// onClose registers fn to run at Close.
func (n *NAT) onClose(fn func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closers = append(n.closers, fn)
}

// Done is closed by Close.
func (n *NAT) Done() <-chan struct{} { return n.closedCh }

// Close stops the listeners and the stack, and returns once the stack's
// link no longer reads LinkFD.
func (n *NAT) Close() {
	n.mu.Lock()
	closers := n.closers
	n.closers = nil
	if n.idle != nil {
		n.idle.Stop()
	}
	n.mu.Unlock()
	select {
	case <-n.closedCh:
	default:
		close(n.closedCh)
	}
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
	n.closeEchoes()
	// Destroy, not Close: Close aborts the endpoints but leaves the
	// link's reader running on the fd number.
	n.stack.Destroy()
}

// refuse logs and counts a flow the policy refused.
func (n *NAT) refuse(proto string, dst netip.AddrPort, why string) {
	n.stats.add(func(s *api.NATStats) { s.Refused++ })
	to := dst.String()
	if dst.Port() == 0 {
		to = dst.Addr().String()
	}
	log.Infof("nat: refused %s to %s: %s", proto, to, why)
}

// admit takes a flow slot of MaxConnections for a flow to dst; over the
// cap it logs and counts the refusal and returns false.
func (n *NAT) admit(proto string, dst netip.AddrPort) bool {
	if !n.lim.acquire() {
		n.stats.add(func(s *api.NATStats) { s.Refused++; s.RefusedLimit++ })
		log.Infof("nat: refused %s to %s: max_connections (%d) flows are open", proto, dst, n.lim.max)
		return false
	}
	n.stats.open(1)
	return true
}

// done gives back the slot admit took.
func (n *NAT) done() {
	n.lim.release()
	n.stats.open(-1)
}

// hostAddr is where on the host a flow to dst goes: the gateway is the
// host's loopback.
func hostAddr(dst netip.AddrPort) netip.AddrPort {
	if dst.Addr() == api.NATGateway {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), dst.Port())
	}
	return dst
}

// WaitPid returns when the process pidfd refers to has exited.
func WaitPid(pidfd int) error {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		return err
	}
}
