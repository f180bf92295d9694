package nat

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"

	"github.com/gvxrun/gvx/api"
)

// holding is a Dialer whose connections stay open until released.
type holding struct {
	mu    sync.Mutex
	peers []net.Conn
}

func (h *holding) dial(context.Context, string, string) (net.Conn, error) {
	a, b := net.Pipe()
	h.mu.Lock()
	h.peers = append(h.peers, b)
	h.mu.Unlock()
	go io.Copy(io.Discard, b)
	return a, nil
}

func (h *holding) closeFirst() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.peers[0].Close()
	h.peers = h.peers[1:]
}

// TestMaxConnections: with max_connections 2, two flows are relayed, a
// third is refused at once (an RST, counted as a limit refusal, no host
// socket), and once a flow ends a new one is admitted again.
func TestMaxConnections(t *testing.T) {
	h := &holding{}
	g, n, _ := setupWith(t, Options{Dial: h.dial, Config: api.NAT{DNS: []string{"127.0.0.1:9"}, MaxConnections: 2}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dst := full(netip.MustParseAddr("198.51.100.1"), 80) // the fake dialer answers; nothing is sent

	var conns []net.Conn
	for i := 0; i < 2; i++ {
		c, err := gonet.DialContextTCP(ctx, g, dst, ipv4.ProtocolNumber)
		if err != nil {
			t.Fatalf("flow %d of 2: %v", i+1, err)
		}
		conns = append(conns, c)
	}
	start := time.Now()
	if c, err := gonet.DialContextTCP(ctx, g, dst, ipv4.ProtocolNumber); err == nil || !strings.Contains(err.Error(), "refused") {
		if c != nil {
			c.Close()
		}
		t.Fatalf("flow 3 of max 2: %v, want connection refused", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the refusal took %v, want an immediate RST", took)
	}
	if s := n.stats.Get(); s.RefusedLimit != 1 || s.Refused != 1 || s.Open != 2 || s.HostSockets != 2 {
		t.Errorf("stats %+v, want 1 refusal for the limit, 2 open flows, 2 host sockets", s)
	}
	// End one flow (both sides): its slot comes back.
	conns[0].Close()
	h.closeFirst()
	waitUntil(t, "the ended flow's slot", func() bool { return n.stats.Get().Open == 1 })
	c, err := gonet.DialContextTCP(ctx, g, dst, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatalf("a flow after one ended: %v", err)
	}
	c.Close()
	conns[1].Close()
}

// TestBandwidth: with bandwidth 2 MiB/s, an upload and a download of 4 MiB
// each through the NAT to a server on 127.0.0.1 take 2 s each (no less
// than 15% under, at most 2.5× on a loaded machine), and the byte
// counters show them.
func TestBandwidth(t *testing.T) {
	const rate, size = 2 << 20, 4 << 20
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	upTook := make(chan time.Duration, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				var op [1]byte
				if _, err := io.ReadFull(c, op[:]); err != nil {
					return
				}
				if op[0] == 'u' {
					start := time.Now()
					io.CopyN(io.Discard, c, size)
					upTook <- time.Since(start)
					return
				}
				c.Write(make([]byte, size))
			}(c)
		}
	}()
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	// Real host sockets: New's own dialer.
	g, n, _ := setupWith(t, Options{Dial: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		Config: api.NAT{DNS: []string{"127.0.0.1:9"}, Bandwidth: rate,
			Egress: &api.Egress{Allow: []string{fmt.Sprintf("10.0.2.2:%d", port)}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	within := func(what string, took time.Duration) {
		want := time.Duration(float64(size) / rate * float64(time.Second))
		got := float64(size) / took.Seconds() / (1 << 20)
		t.Logf("%s: %d MiB in %v = %.2f MiB/s (cap %d MiB/s)", what, size>>20, took, got, rate>>20)
		// The cap shows as the lower bound; the upper one leaves room for
		// a loaded machine (both stacks run in this process), where the
		// bytes can only come slower, never faster.
		if took < want*85/100 || took > want*5/2 {
			t.Errorf("%s took %v, want %v − 15%% … × 2.5 (the cap is %d B/s)", what, took, want, rate)
		}
	}

	c, err := gonet.DialContextTCP(ctx, g, full(api.NATGateway, port), ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("u"))
	go c.Write(make([]byte, size))
	select {
	case took := <-upTook:
		within("upload", took)
	case <-ctx.Done():
		t.Fatalf("upload: the server did not get %d bytes in 30 s; NAT counters %+v", size, n.stats.Get())
	}
	c.Close()

	c, err = gonet.DialContextTCP(ctx, g, full(api.NATGateway, port), ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("d"))
	start := time.Now()
	if k, err := io.CopyN(io.Discard, c, size); err != nil {
		t.Fatalf("download: %d bytes: %v", k, err)
	}
	within("download", time.Since(start))
	// A chunk is counted once its write to the guest returned, which
	// may be after the guest read it.
	waitUntil(t, fmt.Sprintf("byte counters ≥ %d each way", size), func() bool {
		s := n.stats.Get()
		return s.BytesOut >= size && s.BytesIn >= size
	})
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
