// Command icmpecho sends one ICMP echo request from an unprivileged ICMP
// socket (SOCK_DGRAM, what iputils' ping uses without CAP_NET_RAW; a
// gVisor sandbox without --net-raw has no raw sockets for busybox's ping)
// and prints "reply from ADDR seq N" or "no reply": a guest program for
// TestNATEgress.
//
//	icmpecho ADDR TIMEOUT
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: icmpecho ADDR TIMEOUT")
		os.Exit(2)
	}
	dst := net.ParseIP(os.Args[1]).To4()
	timeout, err := time.ParseDuration(os.Args[2])
	if dst == nil || err != nil {
		fmt.Fprintln(os.Stderr, "icmpecho: want an IPv4 address and a duration")
		os.Exit(2)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, syscall.IPPROTO_ICMP)
	if err != nil {
		fmt.Fprintln(os.Stderr, "icmpecho: socket:", err)
		os.Exit(1)
	}
	f := os.NewFile(uintptr(fd), "icmp")
	c, err := net.FilePacketConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "icmpecho:", err)
		os.Exit(1)
	}
	// Type 8 (echo), code 0; the kernel sets the identifier and checksum.
	req := []byte{8, 0, 0, 0, 0, 0, 0, 7, 'g', 'v', 'x'}
	if _, err := c.WriteTo(req, &net.UDPAddr{IP: dst}); err != nil {
		fmt.Fprintln(os.Stderr, "icmpecho: send:", err)
		os.Exit(1)
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			fmt.Println("no reply")
			os.Exit(1)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "icmpecho: receive:", err)
			os.Exit(1)
		}
		if n >= 8 && buf[0] == 0 {
			fmt.Printf("reply from %s seq %d\n", from.(*net.UDPAddr).IP, binary.BigEndian.Uint16(buf[6:8]))
			return
		}
	}
}
