// Command lineserver stands in for dockerd in the docker-relay tests'
// proxied docker-mode sandboxes: on ADDR (GVX_DOCKER_TCP's), once the
// file WAIT exists, it answers each connection's first line and closes
// first — with "pong LINE", or as dockerd would to the shim's GET
// requests (200, "OK" for /_ping, "[]" for anything else).
//
//	lineserver ADDR WAIT
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: lineserver ADDR WAIT")
		os.Exit(2)
	}
	for {
		if _, err := os.Stat(os.Args[2]); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	ln, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go answer(c)
	}
}

func answer(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "GET ") {
		fmt.Fprintf(c, "pong %s\n", line)
		return
	}
	// The rest of the request, read so that the close finds nothing
	// unread (which would reset the connection).
	for {
		h, err := r.ReadString('\n')
		if err != nil || h == "\r\n" || h == "\n" {
			break
		}
	}
	body := "[]"
	if strings.HasPrefix(line, "GET /_ping") {
		body = "OK"
	}
	fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}
