package nat

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/nested"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/gvxrun/gvx/api"
)

// udpIdle ends a UDP flow nobody sent on for this long.
const udpIdle = 60 * time.Second

func addrPort(a tcpip.Address, port uint16) netip.AddrPort {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return netip.AddrPortFrom(ip.Unmap(), port)
}

// forwardTCP handles the guest's SYN to dst (10.0.2.3:53 is the NAT's DNS
// server, dns.go): a refusal is an RST before any host socket exists;
// else the host connection is opened first, and the guest's handshake
// completes only if it succeeded.
func (n *NAT) forwardTCP(r *tcp.ForwarderRequest) {
	id := r.ID()
	dst := addrPort(id.LocalAddress, id.LocalPort)
	if dst.Addr() == api.NATDNS {
		if dst.Port() != 53 {
			n.refuse("tcp", dst, "10.0.2.3 answers DNS on port 53 only")
			r.Complete(true)
			return
		}
		n.serveDNSTCP(r)
		return
	}
	if d := n.policy.Decide(dst.Addr(), dst.Port()); !d.Allow {
		n.refuse("tcp", dst, d.Reason)
		r.Complete(true)
		return
	}
	if !n.admit("tcp", dst) {
		r.Complete(true)
		return
	}
	n.stats.add(func(s *api.NATStats) { s.Allowed++; s.HostSockets++ })
	host, err := n.dial(context.Background(), "tcp", hostAddr(dst).String())
	if err != nil {
		log.Debugf("nat: tcp to %s: %v", dst, err)
		n.done()
		r.Complete(true)
		return
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		host.Close()
		n.done()
		r.Complete(true)
		return
	}
	r.Complete(false)
	ep.SocketOptions().SetKeepAlive(true)
	n.flowStarted()
	go func() {
		defer n.flowEnded()
		defer n.done()
		n.splice(gonet.NewTCPConn(&wq, ep), host)
	}()
}

// idleRelease is how long the NAT waits, once its last TCP flow ended,
// before it gives the memory the flows grew back to the host.
const idleRelease = 2 * time.Second

func (n *NAT) flowStarted() { n.flows.Add(1) }

// flowEnded returns the memory a burst of traffic grew (TCP buffers,
// splice buffers: Go keeps freed heap for reuse) to the host once no TCP
// flow is left: an idle NAT is small again. One timer, pushed back by
// each flow that ends, so a run of short connections is one release.
func (n *NAT) flowEnded() {
	if n.flows.Add(-1) != 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.idle == nil {
		n.idle = time.AfterFunc(idleRelease, n.releaseMemory)
	} else {
		n.idle.Reset(idleRelease)
	}
}

// releaseMemory gives the Go heap's free pages back to the host, if no
// TCP flow is open.
func (n *NAT) releaseMemory() {
	if n.flows.Load() != 0 {
		return
	}
	// Twice: the first GC only moves sync.Pool contents (gVisor's buffer
	// chunks) to the victim cache.
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	log.Infof("nat: idle: heap in use %d KiB (of %d KiB mapped, %d KiB released), stacks %d KiB, runtime total %d KiB",
		ms.HeapInuse>>10, ms.HeapSys>>10, ms.HeapReleased>>10, ms.StackInuse>>10, ms.Sys>>10)
}

// halfCloser is a connection that can end its writes alone.
type halfCloser interface{ CloseWrite() error }

// splice copies both ways between guest and host until both directions
// end, counting the bytes and holding each direction to its bucket.
func (n *NAT) splice(guest, host net.Conn) {
	var wg sync.WaitGroup
	one := func(dst, src net.Conn, b *bucket, count func(int64)) {
		defer wg.Done()
		copyCounted(dst, src, make([]byte, 256<<10), b, count)
		if hc, ok := dst.(halfCloser); ok {
			_ = hc.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go one(host, guest, n.lim.up, n.stats.bytesOut)
	go one(guest, host, n.lim.down, n.stats.bytesIn)
	wg.Wait()
	guest.Close()
	host.Close()
}

// forwardUDP handles the first datagram of a guest's UDP flow. A refusal
// returns false: the stack answers ICMP port unreachable.
func (n *NAT) forwardUDP(r *udp.ForwarderRequest) bool {
	id := r.ID()
	dst := addrPort(id.LocalAddress, id.LocalPort)
	if dst.Addr() == api.NATDNS {
		if dst.Port() != 53 {
			n.refuse("udp", dst, "10.0.2.3 answers DNS on port 53 only")
			return false
		}
		return n.serveDNS(r)
	}
	if d := n.policy.Decide(dst.Addr(), dst.Port()); !d.Allow {
		n.refuse("udp", dst, d.Reason)
		return false
	}
	if !n.admit("udp", dst) {
		return false
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		n.done()
		return true
	}
	n.stats.add(func(s *api.NATStats) { s.Allowed++; s.HostSockets++ })
	guest := gonet.NewUDPConn(&wq, ep)
	host, err := n.dial(context.Background(), "udp", hostAddr(dst).String())
	if err != nil {
		log.Debugf("nat: udp to %s: %v", dst, err)
		guest.Close()
		n.done()
		return true
	}
	go func() {
		defer n.done()
		n.relayUDP(guest, host)
	}()
	return true
}

// relayUDP copies datagrams both ways until neither side sent for udpIdle.
func (n *NAT) relayUDP(guest, host net.Conn) {
	defer guest.Close()
	defer host.Close()
	done := make(chan struct{}, 2)
	one := func(dst, src net.Conn, b *bucket, count func(int64)) {
		buf := make([]byte, 65535)
		for {
			_ = src.SetReadDeadline(time.Now().Add(udpIdle))
			k, err := src.Read(buf)
			if err != nil {
				break
			}
			if b != nil {
				b.take(k)
			}
			if _, err := dst.Write(buf[:k]); err != nil {
				break
			}
			count(int64(k))
		}
		done <- struct{}{}
	}
	go one(host, guest, n.lim.up, n.stats.bytesOut)
	go one(guest, host, n.lim.down, n.stats.bytesIn)
	<-done
}

// echoFilter takes ICMP echo requests to addresses other than the NAT's
// own out of the stack and hands them to forward (echo.go): promiscuous
// mode would otherwise answer a ping to any address itself, a reply no
// host gave.
type echoFilter struct {
	nested.Endpoint
	forward func(req *echoRequest)
}

var _ stack.NetworkDispatcher = (*echoFilter)(nil)

func newEchoFilter(ep stack.LinkEndpoint, forward func(req *echoRequest)) *echoFilter {
	e := &echoFilter{forward: forward}
	e.Endpoint.Init(ep, e)
	return e
}

// DeliverNetworkPacket implements stack.NetworkDispatcher.
func (e *echoFilter) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	if proto == header.IPv4ProtocolNumber {
		if req, ok := foreignEcho(pkt); ok {
			if req != nil {
				e.forward(req)
			}
			return
		}
	}
	e.Endpoint.DeliverNetworkPacket(proto, pkt)
}

// echoRequest is an ICMP echo request of the guest's to an address not
// the NAT's: a copy of its whole IPv4 datagram and the fields the NAT
// forwards it by.
type echoRequest struct {
	datagram []byte
	icmp     header.ICMPv4 // within datagram
	src, dst netip.Addr
}

// foreignEcho says whether pkt is an echo request to an address not the
// NAT's, and returns it if it is whole (nil: a fragment or a malformed
// one, dropped).
func foreignEcho(pkt *stack.PacketBuffer) (*echoRequest, bool) {
	v := pkt.ToView()
	defer v.Release()
	b := v.AsSlice()
	if len(b) < header.IPv4MinimumSize {
		return nil, false
	}
	ip := header.IPv4(b)
	if ip.TransportProtocol() != header.ICMPv4ProtocolNumber {
		return nil, false
	}
	hl := int(ip.HeaderLength())
	if hl < header.IPv4MinimumSize || len(b) < hl+header.ICMPv4MinimumSize || header.ICMPv4(b[hl:]).Type() != header.ICMPv4Echo {
		return nil, false
	}
	dst := ip.DestinationAddress()
	if dst == tcpip.AddrFrom4(api.NATGateway.As4()) || dst == tcpip.AddrFrom4(api.NATDNS.As4()) {
		return nil, false
	}
	if !ip.IsValid(len(b)) || ip.More() || ip.FragmentOffset() != 0 {
		return nil, true
	}
	d := append([]byte(nil), b[:ip.TotalLength()]...)
	return &echoRequest{datagram: d, icmp: header.ICMPv4(d[hl:]),
		src: netip.AddrFrom4(ip.SourceAddress().As4()), dst: netip.AddrFrom4(dst.As4())}, true
}
