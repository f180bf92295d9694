// Package crifwd carries CRI port forwarding into a gVisor pod.
//
// containerd serves PortForward (kubectl port-forward, crictl
// port-forward) by entering the pod's network namespace and dialing
// localhost:PORT there. A gVisor pod's listeners live in the Sentry's own
// network stack, not in that namespace's kernel, so the dial is refused
// (containerd/containerd#6638, google/gvisor#3811). A Forwarder makes the
// dial land: an sk_lookup BPF program attached to the pod's network
// namespace hands every TCP connection to 127.0.0.1 there, whatever its
// port, to one listener the Forwarder opened in that namespace, and the
// Forwarder connects each to the same port of the pod's address, as any
// client on the node would (the Kubernetes network model lets node agents
// reach the node's pods). Nothing but containerd's dial uses the
// namespace's kernel loopback: the guest's 127.0.0.1 is gVisor's.
package crifwd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/containerd/log"
	"golang.org/x/sys/unix"
)

// A Dialer connects to a port of the pod: its address's (TCPTo), or its
// NAT's guest port.
type Dialer func(ctx context.Context, port uint16) (net.Conn, error)

// TCPTo dials ports of target (a pod's address) as any client on the node
// would.
func TCPTo(target netip.Addr) Dialer {
	return func(ctx context.Context, port uint16) (net.Conn, error) {
		d := net.Dialer{Timeout: 10 * time.Second}
		return d.DialContext(ctx, "tcp", netip.AddrPortFrom(target, port).String())
	}
}

// Forwarder steers a pod network namespace's loopback TCP connections to
// the pod.
type Forwarder struct {
	dial Dialer
	ln   *net.TCPListener
	sock *ebpf.Map
	prog *ebpf.Program
	link link.Link

	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// Start attaches the steering to the network namespace at nsPath and
// forwards what it steers, each connection to the port it was made to,
// through dial, until Close.
func Start(ctx context.Context, nsPath string, dial Dialer) (*Forwarder, error) {
	f := &Forwarder{dial: dial, conns: map[net.Conn]struct{}{}}
	var ns int
	err := InNetNS(nsPath, func() error {
		// Plain TCP: Go listens with MPTCP where the kernel has it, and
		// an MPTCP socket cannot go into a socket map.
		var lc net.ListenConfig
		lc.SetMultipathTCP(false)
		l, err := lc.Listen(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("listen on 127.0.0.1: %w", err)
		}
		f.ln = l.(*net.TCPListener)
		ns, err = unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		f.release()
		return nil, fmt.Errorf("port forwarding in %s: %w", nsPath, err)
	}
	defer unix.Close(ns)
	if err := f.attach(ns); err != nil {
		f.release()
		return nil, fmt.Errorf("port forwarding in %s: %w", nsPath, err)
	}
	f.wg.Add(1)
	go f.serve(ctx)
	return f, nil
}

// attach loads the sk_lookup program and its one-socket map and attaches
// them to the network namespace ns.
func (f *Forwarder) attach(ns int) error {
	var err error
	f.sock, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.SockMap, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return fmt.Errorf("socket map: %w", err)
	}
	raw, err := f.ln.SyscallConn()
	if err != nil {
		return err
	}
	var uerr error
	if err := raw.Control(func(fd uintptr) { uerr = f.sock.Put(uint32(0), uint64(fd)) }); err != nil {
		return err
	}
	if uerr != nil {
		return fmt.Errorf("put the listener in the socket map: %w", uerr)
	}
	f.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.SkLookup,
		AttachType:   ebpf.AttachSkLookup,
		License:      "Apache-2.0",
		Instructions: steer(f.sock.FD()),
	})
	if err != nil {
		return fmt.Errorf("load the sk_lookup program: %w", err)
	}
	if f.link, err = link.AttachNetNs(ns, f.prog); err != nil {
		return fmt.Errorf("attach the sk_lookup program: %w", err)
	}
	return nil
}

// Offsets in struct bpf_sk_lookup (linux/bpf.h).
const (
	offFamily   = 8
	offProtocol = 12
	offLocalIP4 = 40
)

// steer is the sk_lookup program: a TCP lookup for 127.0.0.1 (any port)
// gets the socket in slot 0 of the map whose fd is sockMap; any other
// lookup goes on as the kernel would.
func steer(sockMap int) asm.Instructions {
	loopback := int32(binaryLE([4]byte{127, 0, 0, 1}))
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, offProtocol, asm.Word),
		asm.JNE.Imm(asm.R2, unix.IPPROTO_TCP, "pass"),
		asm.LoadMem(asm.R2, asm.R6, offFamily, asm.Word),
		asm.JNE.Imm(asm.R2, unix.AF_INET, "pass"),
		asm.LoadMem(asm.R2, asm.R6, offLocalIP4, asm.Word),
		asm.JNE.Imm32(asm.R2, loopback, "pass"),
		asm.StoreImm(asm.R10, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, sockMap),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R7),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnSkAssign.Call(),
		asm.Mov.Reg(asm.R1, asm.R7),
		asm.FnSkRelease.Call(),
		asm.Mov.Imm(asm.R0, 1).WithSymbol("pass"), // SK_PASS
		asm.Return(),
	}
}

// binaryLE is b as the little-endian word a BPF load of it gives on
// amd64 and arm64.
func binaryLE(b [4]byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// serve accepts the steered connections and forwards each.
func (f *Forwarder) serve(ctx context.Context) {
	defer f.wg.Done()
	for {
		c, err := f.ln.AcceptTCP()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				log.G(ctx).WithError(err).Warn("port forwarding: accept")
			}
			return
		}
		if !f.track(c, true) {
			c.Close()
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.track(c, false)
			f.forward(ctx, c)
		}()
	}
}

// track adds c to the open connections (or removes it); it reports false
// once the Forwarder is closed.
func (f *Forwarder) track(c net.Conn, add bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !add {
		delete(f.conns, c)
		return true
	}
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

// forward connects c (steered to 127.0.0.1:PORT) to the pod's PORT and
// copies both ways, passing each side's half-close on.
func (f *Forwarder) forward(ctx context.Context, c *net.TCPConn) {
	defer c.Close()
	port := c.LocalAddr().(*net.TCPAddr).Port
	up, err := f.dial(ctx, uint16(port))
	if err != nil {
		log.G(ctx).WithError(err).Warnf("port forwarding: connect to the pod's port %d", port)
		return
	}
	if !f.track(up, true) {
		up.Close()
		return
	}
	defer f.track(up, false)
	defer up.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, c)
		if cw, ok := up.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
	_, _ = io.Copy(c, up)
	_ = c.CloseWrite()
	<-done
}

// Close detaches the steering, stops accepting and ends the connections
// it forwards.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	err := f.release()
	f.wg.Wait()
	return err
}

// release closes the listener and the BPF objects.
func (f *Forwarder) release() error {
	var errs []error
	if f.link != nil {
		errs = append(errs, f.link.Close())
	}
	if f.prog != nil {
		errs = append(errs, f.prog.Close())
	}
	if f.sock != nil {
		errs = append(errs, f.sock.Close())
	}
	if f.ln != nil {
		if err := f.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// InNetNS runs fn on an OS thread that has entered the network namespace
// at nsPath (sockets fn opens belong to it). The thread is thrown away
// afterwards if it cannot return to its own namespace.
func InNetNS(nsPath string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return // the thread exits with the goroutine, still locked
		}
		defer unix.Close(self)
		ns, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open network namespace: %w", err)
			return
		}
		err = unix.Setns(ns, unix.CLONE_NEWNET)
		unix.Close(ns)
		if err != nil {
			errc <- fmt.Errorf("enter network namespace: %w", err)
			return
		}
		err = fn()
		if unix.Setns(self, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// PodAddr is the first IPv4 address of global scope in the network
// namespace at nsPath (CNI's address for the pod), read before gVisor
// moves the addresses into the sandbox.
func PodAddr(nsPath string) (netip.Addr, error) {
	var addr netip.Addr
	err := InNetNS(nsPath, func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, i := range ifs {
			if i.Flags&net.FlagLoopback != 0 {
				continue
			}
			as, err := i.Addrs()
			if err != nil {
				return fmt.Errorf("addresses of %s: %w", i.Name, err)
			}
			for _, a := range as {
				n, ok := a.(*net.IPNet)
				if !ok {
					continue
				}
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() && ip.IsGlobalUnicast() {
					addr = ip.Unmap()
					return nil
				}
			}
		}
		return nil
	})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("pod address in %s: %w", nsPath, err)
	}
	if !addr.IsValid() {
		return netip.Addr{}, fmt.Errorf("pod address in %s: no IPv4 address on its interfaces", nsPath)
	}
	return addr, nil
}
