package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// serve answers the guest program's connections on addr: 'c' closes, 'u'
// reads to EOF and answers one byte, 'd' sends the 8-byte count of bytes.
func serve(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return l, nil
}

func handle(c net.Conn) {
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
			k := int64(len(buf))
			if k > left {
				k = left
			}
			if _, err := c.Write(buf[:k]); err != nil {
				return
			}
			left -= k
		}
	}
}

// makeNetns makes the peers' network: a namespace with a veth to the host
// (hostIP on the host side, guestIP inside, a default route back).
func makeNetns() error {
	removeNetns()
	for _, args := range [][]string{
		{"netns", "add", netns},
		{"link", "add", "gvxb-h", "type", "veth", "peer", "name", "gvxb-g"},
		{"link", "set", "gvxb-g", "netns", netns},
		{"addr", "add", hostIP + "/30", "dev", "gvxb-h"},
		{"link", "set", "gvxb-h", "up"},
		{"-n", netns, "addr", "add", guestIP + "/30", "dev", "gvxb-g"},
		{"-n", netns, "link", "set", "gvxb-g", "up"},
		{"-n", netns, "link", "set", "lo", "up"},
		{"-n", netns, "route", "add", "default", "via", hostIP},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			removeNetns()
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// removeNetns deletes the namespace and with it the veth pair.
func removeNetns() {
	exec.Command("ip", "netns", "del", netns).Run()
	exec.Command("ip", "link", "del", "gvxb-h").Run()
}

func durations(ns []int64) []time.Duration {
	out := make([]time.Duration, len(ns))
	for i, n := range ns {
		out[i] = time.Duration(n)
	}
	return out
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/1e3) }
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }
func mbps(bytes, ns int64) float64 {
	if ns == 0 {
		return 0
	}
	return float64(bytes) / (float64(ns) / 1e9) / 1e6
}
func numCPU() int { return runtime.NumCPU() }
