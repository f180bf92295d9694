package nat

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/gvxrun/gvx/api"
)

// benchOptions is a NAT at mtu whose guest may reach the host's loopback
// port (10.0.2.2:port) only, with real host sockets.
func benchOptions(mtu uint32, port uint16) Options {
	return Options{MTU: mtu, Dial: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		Config: api.NAT{DNS: []string{"127.0.0.1:9"}, Egress: &api.Egress{Allow: []string{fmt.Sprintf("10.0.2.2:%d", port)}}}}
}

// BenchmarkUpload sends b.N × 1 MiB from a guest stack through the NAT to a
// real server on 127.0.0.1 (the NAT's data path without the Sentry).
func BenchmarkUpload(b *testing.B) {
	for _, mtu := range []uint32{1500, 65520} {
		b.Run(fmt.Sprintf("mtu%d", mtu), func(b *testing.B) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			done := make(chan int64, 1)
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				n, _ := io.Copy(io.Discard, c)
				c.Close()
				done <- n
			}()
			port := uint16(l.Addr().(*net.TCPAddr).Port)
			g, _, _ := setupWith(b, benchOptions(mtu, port))
			moderate := tcpip.TCPModerateReceiveBufferOption(true)
			g.SetTransportProtocolOption(tcp.ProtocolNumber, &moderate)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := gonet.DialContextTCP(ctx, g, full(api.NATGateway, port), ipv4.ProtocolNumber)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 1<<20)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			c.Close()
			if got := <-done; got != int64(b.N)*int64(len(buf)) {
				b.Fatalf("server got %d bytes, want %d", got, b.N*len(buf))
			}
		})
	}
}

// BenchmarkConnect times a guest stack's TCP connect through the NAT to a
// real server on 127.0.0.1 (the NAT's share of a guest's connect latency,
// without the Sentry and its host-process crossings).
func BenchmarkConnect(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	g, _, _ := setupWith(b, benchOptions(65520, port))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := gonet.DialContextTCP(ctx, g, full(api.NATGateway, port), ipv4.ProtocolNumber)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
