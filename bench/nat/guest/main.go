// Command guest is the NAT benchmark's program inside the sandbox: it
// connects to the bench's server n times (timing each connect), then
// sends and receives bytes over one connection each, and prints JSON.
//
//	guest ADDR:PORT CONNECTS BYTES
package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"
)

// Result is what the bench reads back.
type Result struct {
	ConnectNs  []int64 `json:"connect_ns"`
	UploadNs   int64   `json:"upload_ns"`
	DownloadNs int64   `json:"download_ns"`
	Bytes      int64   `json:"bytes"`
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: guest ADDR:PORT CONNECTS BYTES")
		os.Exit(2)
	}
	addr := os.Args[1]
	n, _ := strconv.Atoi(os.Args[2])
	size, _ := strconv.ParseInt(os.Args[3], 10, 64)
	var r Result
	r.Bytes = size
	for i := 0; i < n; i++ {
		t0 := time.Now()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			fail(err)
		}
		r.ConnectNs = append(r.ConnectNs, time.Since(t0).Nanoseconds())
		c.Write([]byte{'c'})
		c.Close()
	}
	buf := make([]byte, 256<<10)
	// Upload: 'u', then size bytes; the server answers one byte at EOF.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		fail(err)
	}
	t0 := time.Now()
	c.Write([]byte{'u'})
	for left := size; left > 0; {
		k := int64(len(buf))
		if k > left {
			k = left
		}
		if _, err := c.Write(buf[:k]); err != nil {
			fail(err)
		}
		left -= k
	}
	c.(*net.TCPConn).CloseWrite()
	if _, err := io.ReadFull(c, buf[:1]); err != nil {
		fail(err)
	}
	r.UploadNs = time.Since(t0).Nanoseconds()
	c.Close()
	// Download: 'd' and the size; the server sends that many bytes.
	c, err = net.Dial("tcp", addr)
	if err != nil {
		fail(err)
	}
	t0 = time.Now()
	hdr := make([]byte, 9)
	hdr[0] = 'd'
	binary.BigEndian.PutUint64(hdr[1:], uint64(size))
	c.Write(hdr)
	got, err := io.CopyBuffer(io.Discard, c, buf)
	if err != nil || got != size {
		fail(fmt.Errorf("download: %d of %d bytes: %v", got, size, err))
	}
	r.DownloadNs = time.Since(t0).Nanoseconds()
	c.Close()
	json.NewEncoder(os.Stdout).Encode(r)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "guest:", err)
	os.Exit(1)
}
