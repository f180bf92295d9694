// Command gvx-relay runs inside a proxied docker-mode sandbox, between
// the connections gVisor's port forwarding makes for the host's docker
// socket and dockerd (package internal/relay says why).
//
//	gvx-relay LISTEN BACKEND -- INIT [ARG...]
//
// starts `gvx-relay serve LISTEN BACKEND` as its child and then executes
// INIT in its place, so the image's init stays the container's first
// process. The server accepts TCP connections on LISTEN, connects each to
// BACKEND (where the init's dockerd listens, GVX_DOCKER_TCP), sends the
// relay's Hello and relays the framed stream. The shim bind-mounts this
// static binary into the sandbox read-only.
package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/gvxrun/gvx/internal/relay"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "serve" {
		if err := serve(os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintf(os.Stderr, "gvx-relay: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) < 5 || os.Args[3] != "--" {
		fmt.Fprintln(os.Stderr, "usage: gvx-relay LISTEN BACKEND -- INIT [ARG...]")
		os.Exit(2)
	}
	if err := start(os.Args[1], os.Args[2], os.Args[4:]); err != nil {
		fmt.Fprintf(os.Stderr, "gvx-relay: %v\n", err)
		os.Exit(127)
	}
}

// start starts the server and executes the init.
func start(listen, backend string, init []string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("own path: %w", err)
	}
	path, err := exec.LookPath(init[0])
	if err != nil {
		return fmt.Errorf("init %s: %w", init[0], err)
	}
	srv := exec.Command(self, "serve", listen, backend)
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

// serve relays the connections accepted on listen to backend.
func serve(listen, backend string) error {
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
		go handle(c.(*net.TCPConn), backend)
	}
}

// handle connects one stream to the backend; a backend that does not
// answer (dockerd not up yet) closes the stream without a Hello.
func handle(stream *net.TCPConn, backend string) {
	b, err := net.DialTimeout("tcp", backend, 10*time.Second)
	if err != nil {
		stream.Close()
		return
	}
	if err := relay.Hello(stream); err != nil {
		b.Close()
		stream.Close()
		return
	}
	_ = relay.Guest(b.(*net.TCPConn), stream)
}
