// Command gvx-relay runs inside a proxied docker-mode sandbox, between
// the connections gVisor's port forwarding makes for the host's docker
// socket and dockerd (package internal/relay says why).
//
//	gvx-relay [-peer ADDR] LISTEN BACKEND -- INIT [ARG...]
//	gvx-relay inner-tcp
//	gvx-relay bridges NAME=GATEWAY/BITS...
//
// The first form starts `gvx-relay serve LISTEN BACKEND [ADDR]` as its
// child and then executes INIT in its place, so the image's init stays
// the container's first process. The server accepts TCP connections on LISTEN, connects
// each to BACKEND (where the init's dockerd listens, GVX_DOCKER_TCP),
// sends the relay's Hello and relays the framed stream. The shim
// bind-mounts this static binary into the sandbox read-only.
//
// With -peer the server serves only connections from address ADDR and
// closes the others at once: on gvx's NAT (network = "nat") the streams
// come from the NAT (10.0.2.2) to the guest's eth0, which the inner
// containers reach too, rather than from the Sentry to its loopback.
//
// Its connections leave nothing a restore of the sandbox trips over.
// gVisor draws its TCP initial-sequence-number secret anew at each
// restore, so a new connection whose address pair matches a TIME-WAIT
// endpoint saved in the checkpoint has its SYN dropped half of the time,
// until that endpoint expires (60 s); for the Sentry's port forwarding,
// which connects with the sandbox's loader lock held, that stalls every
// control call — execs, signals, other connections — for 63 s. So the
// relay is never the first to close a stream (the endpoint that closes
// first is the one left in TIME-WAIT): it waits for the shim's close
// after its Done, and refuses a stream it cannot serve with
// relay.Refuse rather than closing it. And it dials the backend from
// source ports of its own sequence, saved and restored with it, so a
// restored relay does not reuse a pair whose TIME-WAIT the checkpoint
// holds (dockerd closes its connections first). Resetting streams on
// close (SO_LINGER 0) was tried first and dropped: its timing made a
// gVisor forwarder race show (about one session in 3000 lost its end),
// which internal/relay's nudges now cover.
//
// inner-tcp makes a guest ioctl of gvx-sentry's (below); bridges makes
// dockerd's bridge devices again after a restore (bridges.go).
package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/relay"
)

func main() {
	if len(os.Args) == 2 {
		if req, ok := guestIoctls[os.Args[1]]; ok {
			n, err := sandboxIoctl(req)
			if err != nil {
				fmt.Fprintf(os.Stderr, "gvx-relay: %s: %v\n", os.Args[1], err)
				os.Exit(1)
			}
			fmt.Println(n)
			return
		}
	}
	if len(os.Args) > 1 && os.Args[1] == api.RelayBridgesCommand {
		bridges, err := parseBridges(os.Args[2:])
		if err == nil {
			err = makeBridges(bridges)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "gvx-relay: %s: %v\n", api.RelayBridgesCommand, err)
			os.Exit(1)
		}
		return
	}
	if (len(os.Args) == 4 || len(os.Args) == 5) && os.Args[1] == "serve" {
		peer := ""
		if len(os.Args) == 5 {
			peer = os.Args[4]
		}
		if err := serve(os.Args[2], os.Args[3], peer); err != nil {
			fmt.Fprintf(os.Stderr, "gvx-relay: %v\n", err)
			os.Exit(1)
		}
		return
	}
	args, peer := os.Args[1:], ""
	if len(args) > 1 && args[0] == "-peer" {
		peer, args = args[1], args[2:]
		if net.ParseIP(peer) == nil {
			fmt.Fprintf(os.Stderr, "gvx-relay: -peer %q: want an IP address\n", peer)
			os.Exit(2)
		}
	}
	if len(args) < 4 || args[2] != "--" {
		fmt.Fprintln(os.Stderr, "usage: gvx-relay [-peer ADDR] LISTEN BACKEND -- INIT [ARG...]")
		os.Exit(2)
	}
	if err := start(args[0], args[1], peer, args[3:]); err != nil {
		fmt.Fprintf(os.Stderr, "gvx-relay: %v\n", err)
		os.Exit(127)
	}
}

// guestIoctls are the subcommands that make one of gvx-sentry's guest
// ioctls and print its result: inner-tcp counts the TCP sockets of inner
// network namespaces a restore would wait on, which refuse a checkpoint
// (api.IoctlInnerTCP); the shim and the rollout engine have the guest
// run it before a checkpoint.
var guestIoctls = map[string]uintptr{
	api.RelayInnerTCPCommand: api.IoctlInnerTCP,
}

// sandboxIoctl makes gvx-sentry's ioctl req on a socket and returns its
// result.
func sandboxIoctl(req uintptr) (int, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer syscall.Close(fd)
	n, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, 0)
	if errno != 0 {
		return 0, fmt.Errorf("ioctl %#x: %w (not in a gvx sandbox, or its gvx-sentry predates it)", req, errno)
	}
	return int(n), nil
}

// start starts the server and executes the init.
func start(listen, backend, peer string, init []string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("own path: %w", err)
	}
	path, err := exec.LookPath(init[0])
	if err != nil {
		return fmt.Errorf("init %s: %w", init[0], err)
	}
	sargs := []string{"serve", listen, backend}
	if peer != "" {
		sargs = append(sargs, peer)
	}
	srv := exec.Command(self, sargs...)
	srv.Stdout, srv.Stderr = os.Stderr, os.Stderr
	// Its own process group: a signal to the init's group is not its.
	srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := srv.Start(); err != nil {
		return fmt.Errorf("start the server: %w", err)
	}
	if err := syscall.Exec(path, init, os.Environ()); err != nil {
		_ = srv.Process.Kill()
		return fmt.Errorf("exec %s: %w", path, err)
	}
	return nil
}

// serve relays the connections accepted on listen to backend; with peer
// ("" for any), only those from that address.
func serve(listen, backend, peer string) error {
	want := net.ParseIP(peer)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		if want != nil && !c.RemoteAddr().(*net.TCPAddr).IP.Equal(want) {
			c.Close()
			continue
		}
		go handle(c.(*net.TCPConn), backend)
	}
}

// handle connects one stream to the backend; a backend that does not
// answer (dockerd not up yet) has the stream refused.
func handle(stream *net.TCPConn, backend string) {
	b, err := dialBackend(backend)
	if err != nil {
		relay.Refuse(stream, refuseWait)
		return
	}
	if err := relay.Hello(stream); err != nil {
		b.Close()
		stream.Close()
		return
	}
	_ = relay.Guest(b.(*net.TCPConn), stream)
}

// refuseWait bounds the wait for the shim's close of a refused stream.
const refuseWait = 10 * time.Second

// Source ports of the backend's connections: the relay's own sequence
// over [firstPort, firstPort+numPorts), which it keeps across a
// checkpoint, so the connections after a restore do not reuse the
// address pairs of those just before it (see the package comment).
const (
	firstPort = 40000
	numPorts  = 20000
)

var nextPort atomic.Uint32

func init() { nextPort.Store(uint32(time.Now().UnixNano() % numPorts)) }

// reuseAddr sets SO_REUSEADDR on a backend connection's socket, so that
// a guest server binding a port of the sequence with SO_REUSEADDR too (as
// most servers do; both sockets need it) may share it with one of the
// relay's connections, as it may with any other bound connection.
func reuseAddr(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	}); err != nil {
		return err
	}
	return serr
}

// dialBackend connects to backend from the next free port of the
// sequence.
func dialBackend(backend string) (net.Conn, error) {
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for i := 0; i < 64 && time.Now().Before(deadline); i++ {
		port := firstPort + int((nextPort.Add(1)-1)%numPorts)
		d := net.Dialer{Deadline: deadline, LocalAddr: &net.TCPAddr{Port: port}, Control: reuseAddr}
		var c net.Conn
		if c, err = d.Dial("tcp", backend); err == nil {
			return c, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) && !errors.Is(err, syscall.EADDRNOTAVAIL) {
			return nil, err
		}
	}
	return nil, err
}
