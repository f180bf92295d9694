package nat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"

	"github.com/gvxrun/gvx/api"
)

// Listen binds the host side of every published port (as the caller, who
// may be root: ports below 1024, sockets in the owner's directory) and
// returns the sockets' files in order. A unix socket is created mode 0600
// and owned by its api.Owner. On error nothing is left behind.
func Listen(ports []string, owners []api.Owner) (files []*os.File, err error) {
	var made []string
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			for _, p := range made {
				os.Remove(p)
			}
			files = nil
		}
	}()
	for _, s := range ports {
		p, perr := api.ParsePort(s)
		if perr != nil {
			return files, perr
		}
		var f *os.File
		switch {
		case p.Unix != "":
			f, err = listenUnix(p.Unix, owners)
			if err == nil {
				made = append(made, p.Unix)
			}
		case p.Proto == "udp":
			var c net.PacketConn
			if c, err = net.ListenPacket("udp", netip.AddrPortFrom(p.Host, p.HostPort).String()); err == nil {
				f, err = c.(*net.UDPConn).File()
				c.Close()
			}
		default:
			var l net.Listener
			if l, err = net.Listen("tcp", netip.AddrPortFrom(p.Host, p.HostPort).String()); err == nil {
				f, err = l.(*net.TCPListener).File()
				l.Close()
			}
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			return files, fmt.Errorf("publish port %q: host port %d is taken, by another sandbox or a host process (a nat.ports entry of the gvx config publishes for every task: give such ports per task, dev.gvx.nat): %w", s, p.HostPort, err)
		}
		if err != nil {
			return files, fmt.Errorf("publish port %q: %w", s, err)
		}
		files = append(files, f)
	}
	return files, nil
}

func listenUnix(path string, owners []api.Owner) (*os.File, error) {
	uid, gid := -1, -1
	for _, o := range owners {
		if o.Path == path {
			uid, gid = o.UID, o.GID
		}
	}
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("%s already exists: remove it or publish on another path", path)
	}
	addr, release, err := api.UnixAddr(path) // a path too long for an address too
	if err != nil {
		return nil, err
	}
	defer release()
	l, err := net.Listen("unix", addr)
	if err != nil {
		return nil, err
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	f, err := ul.File()
	ul.Close()
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err == nil && uid >= 0 {
		err = os.Lchown(path, uid, gid)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		os.Remove(path)
		return nil, err
	}
	return f, nil
}

// publish serves each listener: a host connection or datagram becomes one
// from 10.0.2.2 to the guest's port.
func (n *NAT) publish(ports []string, files []*os.File) error {
	if len(files) != len(ports) {
		return fmt.Errorf("nat: %d published ports but %d sockets", len(ports), len(files))
	}
	for i, s := range ports {
		p, err := api.ParsePort(s)
		if err != nil {
			return err
		}
		guest := tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(api.NATGuest.As4()), Port: p.GuestPort}
		if p.Proto == "udp" && p.Unix == "" {
			c, err := net.FilePacketConn(files[i])
			files[i].Close()
			if err != nil {
				return fmt.Errorf("nat: port %q: %w", s, err)
			}
			n.onClose(func() { c.Close() })
			go n.serveUDP(c, guest)
			continue
		}
		l, err := net.FileListener(files[i])
		files[i].Close()
		if err != nil {
			return fmt.Errorf("nat: port %q: %w", s, err)
		}
		if ul, ok := l.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false) // the shim removes it: this uid may not
		}
		n.onClose(func() { l.Close() })
		go n.serveTCP(l, guest)
	}
	return nil
}

func (n *NAT) serveTCP(l net.Listener, guest tcpip.FullAddress) {
	for {
		c, err := l.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				log.Warningf("nat: published port %s: %v", l.Addr(), err)
			}
			return
		}
		go n.toGuest(c, guest.Port, l.Addr().String(), nil)
	}
}

// toGuest connects host connection c to the guest's TCP port (from
// 10.0.2.2, as a published port's connection) and splices the two; from
// names c's side in the log. answer, if set, is told the dial's outcome
// before any byte is spliced (and c is dropped when it fails). The flow
// counts against MaxConnections and the bandwidth cap.
func (n *NAT) toGuest(c net.Conn, port uint16, from string, answer func(error) error) {
	local := tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(api.NATGateway.As4())}
	guest := tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(api.NATGuest.As4()), Port: port}
	if !n.admit("published tcp", netip.AddrPortFrom(api.NATGuest, port)) {
		if answer != nil {
			_ = answer(fmt.Errorf("over max_connections"))
		}
		c.Close()
		return
	}
	defer n.done()
	n.stats.add(func(s *api.NATStats) { s.Published++ })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	g, err := gonet.DialTCPWithBind(ctx, n.stack, local, guest, ipv4.ProtocolNumber)
	cancel()
	if answer != nil {
		if aerr := answer(err); aerr != nil && err == nil {
			g.Close()
			err = aerr
		}
	}
	if err != nil {
		log.Infof("nat: %s → guest port %d: %v", from, port, err)
		c.Close()
		return
	}
	n.flowStarted()
	defer n.flowEnded()
	// The guest's side is "in": published bytes to the guest are host →
	// guest, as an egress flow's answer is.
	n.splice(g, c)
}

func (n *NAT) serveUDP(c net.PacketConn, guest tcpip.FullAddress) {
	local := &tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(api.NATGateway.As4())}
	var mu sync.Mutex
	flows := map[string]net.Conn{}
	buf := make([]byte, 65535)
	for {
		k, from, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		mu.Lock()
		g, ok := flows[from.String()]
		if !ok {
			if !n.admit("published udp", netip.AddrPortFrom(api.NATGuest, guest.Port)) {
				mu.Unlock()
				continue
			}
			g, err = gonet.DialUDP(n.stack, local, &guest, ipv4.ProtocolNumber)
			if err != nil {
				n.done()
				mu.Unlock()
				continue
			}
			flows[from.String()] = g
			n.stats.add(func(s *api.NATStats) { s.Published++ })
			go func(g net.Conn, from net.Addr) {
				b := make([]byte, 65535)
				for {
					_ = g.SetReadDeadline(time.Now().Add(udpIdle))
					k, err := g.Read(b)
					if err != nil {
						break
					}
					if n.lim.up != nil {
						n.lim.up.take(k)
					}
					if w, err := c.WriteTo(b[:k], from); err == nil {
						n.stats.bytesOut(int64(w))
					}
				}
				mu.Lock()
				delete(flows, from.String())
				mu.Unlock()
				g.Close()
				n.done()
			}(g, from)
		}
		mu.Unlock()
		if n.lim.down != nil {
			n.lim.down.take(k)
		}
		if w, err := g.Write(buf[:k]); err == nil {
			n.stats.bytesIn(int64(w))
		}
	}
}
