// Command tcpdns resolves names through a DNS server over TCP only (Go's
// resolver with a Dial that always opens a TCP connection) and prints
// each name's IPv4 addresses, one line per name: a guest program for
// TestNATEgress (busybox's nslookup cannot force TCP).
//
//	tcpdns SERVER:PORT NAME...
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: tcpdns SERVER:PORT NAME...")
		os.Exit(2)
	}
	server := os.Args[1]
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", server)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, name := range os.Args[2:] {
		ips, err := r.LookupIP(ctx, "ip4", name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "tcpdns: %s: %v\n", name, err)
			os.Exit(1)
		}
		var out []string
		for _, ip := range ips {
			out = append(out, ip.String())
		}
		fmt.Printf("%s %s\n", name, strings.Join(out, ","))
	}
}
