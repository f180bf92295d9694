package nat

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gvxrun/gvx/api"
)

// rawNAT starts a NAT with o (startNAT; a DNS server if o has none)
// whose guest is the test itself: it writes and reads whole IPv4
// datagrams on the returned end of the link.
func rawNAT(t *testing.T, o Options) (int, *NAT) {
	t.Helper()
	if o.Config.DNS == nil {
		o.Config.DNS = []string{"127.0.0.1:9"}
	}
	fd, n, _ := startNAT(t, o)
	return fd, n
}

// sendEcho writes the guest's echo request to dst.
func sendEcho(t *testing.T, fd int, dst netip.Addr, ident, seq uint16, payload []byte) {
	t.Helper()
	msg := header.ICMPv4(make([]byte, header.ICMPv4MinimumSize+len(payload)))
	msg.SetType(header.ICMPv4Echo)
	msg.SetIdent(ident)
	msg.SetSequence(seq)
	copy(msg.Payload(), payload)
	msg.SetChecksum(^checksum.Checksum(msg, 0))
	b := make([]byte, header.IPv4MinimumSize+len(msg))
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(header.ICMPv4ProtocolNumber),
		SrcAddr: tcpip.AddrFrom4(api.NATGuest.As4()), DstAddr: tcpip.AddrFrom4(dst.As4())})
	ip.SetChecksum(^ip.CalculateChecksum())
	copy(b[header.IPv4MinimumSize:], msg)
	if _, err := unix.Write(fd, b); err != nil {
		t.Fatal(err)
	}
}

// readICMP reads the next ICMP message the NAT sends the guest within 2 s
// (other datagrams skipped): its source and the message, checked whole.
func readICMP(t *testing.T, fd int) (netip.Addr, header.ICMPv4, bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	buf := make([]byte, 65536)
	for time.Now().Before(deadline) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if k, _ := unix.Poll(pfd, int(time.Until(deadline)/time.Millisecond)+1); k <= 0 {
			continue
		}
		m, err := unix.Read(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		ip := header.IPv4(buf[:m])
		if !ip.IsValid(m) || ip.TransportProtocol() != header.ICMPv4ProtocolNumber {
			continue
		}
		if ip.CalculateChecksum() != 0xffff {
			t.Errorf("the IPv4 header's checksum is wrong")
		}
		if ip.DestinationAddress() != tcpip.AddrFrom4(api.NATGuest.As4()) {
			t.Errorf("an ICMP message to %s, not the guest", ip.DestinationAddress())
		}
		msg := header.ICMPv4(append([]byte(nil), ip.Payload()...))
		if checksum.Checksum(msg, 0) != 0xffff {
			t.Errorf("the ICMP checksum is wrong")
		}
		return netip.AddrFrom4(ip.SourceAddress().As4()), msg, true
	}
	return netip.Addr{}, nil, false
}

// netnsEcho is a network namespace of the test's own (its thread's) with
// 192.0.2.1 on its lo and net.ipv4.ping_group_range set to groups; open
// opens OpenEcho's sockets in it.
type netnsEcho struct {
	calls chan func()
	opens atomic.Int32
}

var testPeer = netip.MustParseAddr("192.0.2.1")

func newNetnsEcho(t *testing.T, groups string) *netnsEcho {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (a network namespace of its own)")
	}
	ns := &netnsEcho{calls: make(chan func())}
	ready := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread and its namespace end with the goroutine
		ready <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return err
			}
			lo, err := netlink.LinkByName("lo")
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(lo); err != nil {
				return err
			}
			addr, _ := netlink.ParseAddr(testPeer.String() + "/32")
			if err := netlink.AddrAdd(lo, addr); err != nil {
				return err
			}
			return os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte(groups), 0)
		}()
		for {
			select {
			case fn := <-ns.calls:
				fn()
			case <-stop:
				return
			}
		}
	}()
	if err := <-ready; err != nil {
		close(stop)
		t.Fatalf("network namespace: %v", err)
	}
	t.Cleanup(func() { close(stop) })
	return ns
}

func (ns *netnsEcho) open() (net.PacketConn, error) {
	ns.opens.Add(1)
	var c net.PacketConn
	var err error
	done := make(chan struct{})
	ns.calls <- func() { c, err = OpenEcho(); close(done) }
	<-done
	return c, err
}

// TestEchoForward: the guest's echo requests to an address outside the
// NAT go out through a real ping socket (in a network namespace the test
// made, where the address is the kernel's own) and each reply comes back
// from that address with the guest's identifier, sequence and payload; a
// session's requests share one host socket, which counts as a flow: a
// second session over max_connections (1 here) is refused.
func TestEchoForward(t *testing.T) {
	ns := newNetnsEcho(t, "0 2147483647")
	st := &Stats{}
	fd, _ := rawNAT(t, Options{Echo: ns.open, Stats: st, Config: api.NAT{MaxConnections: 1}})
	for seq := uint16(1); seq <= 3; seq++ {
		payload := []byte("gvx echo " + string(rune('0'+seq)))
		sendEcho(t, fd, testPeer, 0x4242, seq, payload)
		src, msg, ok := readICMP(t, fd)
		if !ok {
			t.Fatalf("no reply to echo %d", seq)
		}
		if src != testPeer || msg.Type() != header.ICMPv4EchoReply || msg.Ident() != 0x4242 || msg.Sequence() != seq || !bytes.Equal(msg.Payload(), payload) {
			t.Errorf("reply to echo %d: from %s type %d ident %#x seq %d payload %q", seq, src, msg.Type(), msg.Ident(), msg.Sequence(), msg.Payload())
		}
	}
	if k := ns.opens.Load(); k != 1 {
		t.Errorf("%d host echo sockets for one session, want 1", k)
	}
	sendEcho(t, fd, testPeer, 0x4343, 1, []byte("second session"))
	if src, msg, ok := readICMP(t, fd); !ok || src != api.NATGateway || msg.Type() != header.ICMPv4DstUnreachable {
		t.Errorf("a second session over max_connections: %v from %s, want refused", ok, src)
	}
	if s := st.Get(); s.HostSockets != 1 || s.Allowed != 1 || s.Refused != 1 || s.RefusedLimit != 1 || s.Open != 1 {
		t.Errorf("stats %+v, want 1 allowed session on 1 host socket, open, and 1 refused at the cap", s)
	}
}

// TestEchoRefused: an echo request the policy refuses, or one the host's
// ping_group_range leaves no socket for, is answered at once with
// "communication administratively prohibited" from the gateway, quoting
// the request, and counted; the policy's refusal opens no host socket.
func TestEchoRefused(t *testing.T) {
	check := func(t *testing.T, fd int, dst netip.Addr, st *Stats) {
		t.Helper()
		t0 := time.Now()
		sendEcho(t, fd, dst, 7, 1, []byte("x"))
		src, msg, ok := readICMP(t, fd)
		if !ok {
			t.Fatal("no answer to a refused echo")
		}
		if src != api.NATGateway || msg.Type() != header.ICMPv4DstUnreachable || msg.Code() != header.ICMPv4AdminProhibited {
			t.Errorf("answer from %s type %d code %d, want 10.0.2.2's unreachable, administratively prohibited", src, msg.Type(), msg.Code())
		}
		quoted := header.IPv4(msg.Payload())
		if len(quoted) < header.IPv4MinimumSize || quoted.DestinationAddress() != tcpip.AddrFrom4(dst.As4()) {
			t.Errorf("the answer does not quote the request to %s", dst)
		}
		if took := time.Since(t0); took > 500*time.Millisecond {
			t.Errorf("the refusal took %s", took)
		}
		if s := st.Get(); s.Refused != 1 || s.HostSockets != 0 || s.Open != 0 {
			t.Errorf("stats %+v, want 1 refused, no host socket", s)
		}
	}
	t.Run("policy", func(t *testing.T) {
		var opens atomic.Int32
		st := &Stats{}
		fd, _ := rawNAT(t, Options{Stats: st, Echo: func() (net.PacketConn, error) {
			opens.Add(1)
			return noEcho()
		}})
		check(t, fd, netip.MustParseAddr("10.1.2.3"), st)
		if opens.Load() != 0 {
			t.Error("the refused echo opened a host socket")
		}
	})
	t.Run("no ping sockets", func(t *testing.T) {
		ns := newNetnsEcho(t, "1 0")
		st := &Stats{}
		fd, _ := rawNAT(t, Options{Echo: ns.open, Stats: st})
		check(t, fd, testPeer, st)
		if ns.opens.Load() != 1 {
			t.Error("the NAT did not try a host ping socket")
		}
	})
}
