package nat

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/gvxrun/gvx/api"
)

// BenchmarkMemory measures a NAT process's memory as bench/nat does, but
// without a sandbox: the guest is a netstack in this process on the
// other end of the socketpair, the NAT a child process — this test
// binary (TestMemoryChild), or with GVX_NATMEM_BIN=path/to/gvx-sentry
// the real `gvx-sentry gvx-nat` (run as root: it drops to uid 100000).
// 200 connects, then GVX_NATMEM_BYTES (512 MiB) up and down through a
// server on 127.0.0.1; the NAT's USS idle and 3 s after, without the
// clean pages of its binary (in a sandbox the Sentry and gofer share
// them). GVX_NATMEM_ENV adds variables to the NAT's environment
// (GOMAXPROCS=1 …).
//
//	go test -run '^$' -bench Memory -benchtime 1x ./nat/
func BenchmarkMemory(b *testing.B) {
	size := int64(512 << 20)
	if v := os.Getenv("GVX_NATMEM_BYTES"); v != "" {
		size, _ = strconv.ParseInt(v, 10, 64)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go serveMemoryBench(l)
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	fds, err := LinkPair()
	if err != nil {
		b.Fatal(err)
	}
	natEnd := os.NewFile(uintptr(fds[1]), "nat")
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryChild$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("GVX_NATMEM_CHILD=%d", port))
	cmd.ExtraFiles = []*os.File{natEnd}
	if bin := os.Getenv("GVX_NATMEM_BIN"); bin != "" {
		// gvx-nat's files: the link, a pidfd to wait on, the stats file.
		sleep := exec.Command("sleep", "600")
		if err := sleep.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { sleep.Process.Kill(); sleep.Wait() }()
		pidfd, err := unix.PidfdOpen(sleep.Process.Pid, 0)
		if err != nil {
			b.Fatal(err)
		}
		stats, err := os.CreateTemp("", "natstats")
		if err != nil {
			b.Fatal(err)
		}
		defer os.Remove(stats.Name())
		defer stats.Close()
		if err := stats.Chown(100000, 100000); err != nil {
			b.Fatal(err)
		}
		cfg := fmt.Sprintf(`{"dns":["127.0.0.1:9"],"egress":{"allow":["10.0.2.2:%d"]}}`, port)
		cmd = exec.Command(bin, "--root", b.TempDir(), api.NATCommand, "100000", "100000", cfg)
		cmd.ExtraFiles = []*os.File{natEnd, os.NewFile(uintptr(pidfd), "sandbox"), stats}
	}
	cmd.Env = append(cmd.Environ(), strings.Fields(os.Getenv("GVX_NATMEM_ENV"))...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	natEnd.Close()
	defer func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid

	g := guestStackMTU(b, fds[0], api.NATMTU)
	moderate := tcpip.TCPModerateReceiveBufferOption(true)
	g.SetTransportProtocolOption(tcp.ProtocolNumber, &moderate)
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4 << 10, Default: 1 << 20, Max: 8 << 20}
	g.SetTransportProtocolOption(tcp.ProtocolNumber, &rcv)
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: 4 << 10, Default: 1 << 20, Max: 8 << 20}
	g.SetTransportProtocolOption(tcp.ProtocolNumber, &snd)
	time.Sleep(time.Second)
	idle := anonUSS(pid)
	dial := func() net.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := gonet.DialContextTCP(ctx, g, full(api.NATGateway, port), ipv4.ProtocolNumber)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	var lat []time.Duration
	for i := 0; i < 200; i++ {
		t0 := time.Now()
		c := dial()
		lat = append(lat, time.Since(t0))
		c.Write([]byte{'c'})
		c.Close()
	}
	buf := make([]byte, 256<<10)
	c := dial()
	t0 := time.Now()
	c.Write([]byte{'u'})
	for left := size; left > 0; left -= int64(len(buf)) {
		if _, err := c.Write(buf[:min(int64(len(buf)), left)]); err != nil {
			b.Fatal(err)
		}
	}
	c.(*gonet.TCPConn).CloseWrite()
	io.ReadFull(c, buf[:1])
	up := time.Since(t0)
	c.Close()
	c = dial()
	t0 = time.Now()
	hdr := make([]byte, 9)
	hdr[0] = 'd'
	binary.BigEndian.PutUint64(hdr[1:], uint64(size))
	c.Write(hdr)
	got, _ := io.CopyBuffer(io.Discard, c, buf)
	down := time.Since(t0)
	c.Close()
	if got != size {
		b.Fatalf("downloaded %d of %d bytes", got, size)
	}
	time.Sleep(3 * time.Second) // the NAT's idle release is 2 s after the last flow
	after := anonUSS(pid)
	slices.Sort(lat)
	b.ReportMetric(float64(idle)/(1<<20), "idle-MiB")
	b.ReportMetric(float64(after)/(1<<20), "after-MiB")
	b.ReportMetric(float64(size)/up.Seconds()/1e6, "up-MB/s")
	b.ReportMetric(float64(size)/down.Seconds()/1e6, "down-MB/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "connect-p50-µs")
}

// TestMemoryChild is BenchmarkMemory's NAT process (GVX_NATMEM_CHILD=PORT
// set, the link on fd 3); otherwise it skips.
func TestMemoryChild(t *testing.T) {
	port := os.Getenv("GVX_NATMEM_CHILD")
	if port == "" {
		t.Skip("BenchmarkMemory's NAT process")
	}
	n, err := New(Options{LinkFD: 3, Config: api.NAT{DNS: []string{"127.0.0.1:9"}, Egress: &api.Egress{Allow: []string{"10.0.2.2:" + port}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	io.Copy(io.Discard, os.Stdin) // until the benchmark ends
}

// serveMemoryBench is bench/nat's server: 'c' closes, 'u' reads to EOF
// and answers one byte, 'd' and a count sends that many bytes.
func serveMemoryBench(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 256<<10)
			if _, err := io.ReadFull(c, buf[:1]); err != nil {
				return
			}
			switch buf[0] {
			case 'u':
				io.CopyBuffer(io.Discard, c, buf)
				c.Write([]byte{1})
			case 'd':
				if _, err := io.ReadFull(c, buf[:8]); err != nil {
					return
				}
				for left := int64(binary.BigEndian.Uint64(buf[:8])); left > 0; {
					k := min(int64(len(buf)), left)
					if _, err := c.Write(buf[:k]); err != nil {
						return
					}
					left -= k
				}
			}
		}()
	}
}

// anonUSS is pid's USS without the clean pages of file mappings.
func anonUSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	var file bool
	var out int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 {
			continue
		}
		if !strings.HasSuffix(fs[0], ":") {
			file = len(fs) >= 6 && strings.HasPrefix(fs[5], "/")
			continue
		}
		if fs[0] == "Private_Dirty:" || (fs[0] == "Private_Clean:" && !file) {
			v, _ := strconv.ParseInt(fs[1], 10, 64)
			out += v << 10
		}
	}
	return out
}
