package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/containerd/log"
	"github.com/urfave/cli/v3"

	"github.com/gvxrun/gvx"
)

// portForwardCommand is `gvx port-forward`.
func portForwardCommand() *cli.Command {
	return &cli.Command{
		Name:      "port-forward",
		Usage:     "forward local ports to a NAT sandbox's guest ports (kubectl port-forward's shape)",
		ArgsUsage: "ID [ADDR:]LOCALPORT:GUESTPORT...",
		Description: "Listens on 127.0.0.1 (or ADDR) and connects each connection to the guest's port through the sandbox's NAT " +
			"(the guest sees it come from 10.0.2.2); nothing is published by the sandbox itself. LOCALPORT 0 picks a free port. " +
			"Runs until interrupted. The sandbox needs network \"nat\" (gvx run --net nat).",
		Flags:  sdkFlags(),
		Action: portForwardAction,
	}
}

// forwardSpec is one [ADDR:]LOCALPORT:GUESTPORT.
type forwardSpec struct {
	local netip.AddrPort
	guest int
}

func parseForward(s string) (forwardSpec, error) {
	bad := func(why string) (forwardSpec, error) {
		return forwardSpec{}, fmt.Errorf("port %q: %s; want [ADDR:]LOCALPORT:GUESTPORT (e.g. 8080:80, 0.0.0.0:8080:80)", s, why)
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return bad("no guest port")
	}
	guest, err := strconv.Atoi(s[i+1:])
	if err != nil || guest < 1 || guest > 65535 {
		return bad("guest port " + s[i+1:] + " is not 1 to 65535")
	}
	rest, addr := s[:i], netip.MustParseAddr("127.0.0.1")
	if j := strings.LastIndexByte(rest, ':'); j >= 0 {
		if addr, err = netip.ParseAddr(strings.Trim(rest[:j], "[]")); err != nil {
			return bad("address: " + err.Error())
		}
		rest = rest[j+1:]
	}
	local, err := strconv.Atoi(rest)
	if err != nil || local < 0 || local > 65535 {
		return bad("local port " + rest + " is not 0 to 65535")
	}
	return forwardSpec{local: netip.AddrPortFrom(addr, uint16(local)), guest: guest}, nil
}

func portForwardAction(ctx context.Context, cmd *cli.Command) error {
	args := cmd.Args().Slice()
	if len(args) < 2 {
		return usageError(cmd, "want a sandbox ID and at least one [ADDR:]LOCALPORT:GUESTPORT")
	}
	var specs []forwardSpec
	for _, a := range args[1:] {
		f, err := parseForward(a)
		if err != nil {
			return err
		}
		specs = append(specs, f)
	}
	c, sb, err := attachSDK(ctx, cmd, args[0])
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	if nw, err := sb.Network(ctx); err != nil {
		return err
	} else if nw != gvx.NetworkNAT {
		return fmt.Errorf("sandbox %s has no NAT (network %q): its ports are reached through a NAT only; run it with --net nat", args[0], nw)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var wg sync.WaitGroup
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
		wg.Wait()
	}()
	for _, f := range specs {
		l, err := net.Listen("tcp", f.local.String())
		if err != nil {
			return fmt.Errorf("listen on %s: %w", f.local, err)
		}
		listeners = append(listeners, l)
		fmt.Fprintf(cmd.Root().Writer, "Forwarding from %s -> %d\n", l.Addr(), f.guest)
		wg.Add(1)
		go func() {
			defer wg.Done()
			forwardListener(ctx, sb, l, f.guest, &wg)
		}()
	}
	<-ctx.Done()
	return nil
}

// forwardListener connects each connection l accepts to the guest's port.
func forwardListener(ctx context.Context, sb *gvx.Sandbox, l net.Listener, guest int, wg *sync.WaitGroup) {
	for {
		c, err := l.Accept()
		if err != nil {
			return // closed
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			up, err := sb.DialPort(ctx, guest)
			if err != nil {
				log.G(ctx).WithError(err).Warnf("gvx port-forward: %s -> %d", l.Addr(), guest)
				return
			}
			defer up.Close()
			stop := context.AfterFunc(ctx, func() { c.Close(); up.Close() })
			defer stop()
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = io.Copy(up, c)
				closeWrite(up)
			}()
			_, _ = io.Copy(c, up)
			closeWrite(c)
			<-done
		}()
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
