package relay

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-ch
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// lossy copies like gVisor's port forwarding does: 16 KiB reads, each
// written to a buffer of cap bytes not yet taken by its reader, and what
// does not fit is dropped. It returns the dropped byte count's counter.
func lossy(from io.Reader, to io.WriteCloser, cap int) *atomic.Int64 {
	var dropped atomic.Int64
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	var q []byte
	eof := false
	go func() {
		buf := make([]byte, 16<<10)
		for {
			n, err := from.Read(buf)
			mu.Lock()
			for len(q) >= cap && !eof { // full: the writer waits
				cond.Wait()
			}
			take := n
			if avail := cap - len(q); take > avail {
				take = avail
			}
			dropped.Add(int64(n - take))
			q = append(q, buf[:take]...)
			if err != nil {
				eof = true
			}
			cond.Broadcast()
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		for {
			mu.Lock()
			for len(q) == 0 && !eof {
				cond.Wait()
			}
			if len(q) == 0 {
				mu.Unlock()
				to.Close()
				return
			}
			// Acknowledged in pieces, as TCP segments are: the space
			// frees a little at a time.
			chunk := append([]byte(nil), q[:min(len(q), 4<<10)]...)
			mu.Unlock()
			if _, err := to.Write(chunk); err != nil {
				mu.Lock()
				eof, q = true, nil
				cond.Broadcast()
				mu.Unlock()
				return
			}
			mu.Lock()
			q = q[len(chunk):]
			cond.Broadcast()
			mu.Unlock()
		}
	}()
	return &dropped
}

// slowCopy reads r in small pieces with pauses and hashes what it read.
func slowCopy(r io.Reader, pause time.Duration) (int64, [32]byte) {
	h := sha256.New()
	buf := make([]byte, 4<<10)
	var n int64
	for i := 0; ; i++ {
		m, err := r.Read(buf)
		h.Write(buf[:m])
		n += int64(m)
		if err != nil {
			break
		}
		if i%64 == 0 {
			time.Sleep(pause)
		}
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return n, sum
}

// chain is client ⇄ Host ⇄ lossy forwarder (both ways) ⇄ Guest ⇄ backend;
// it returns the client's and the backend's ends and the drop counters.
func chain(t *testing.T, capacity int) (client, backend *net.TCPConn, drops []*atomic.Int64, hostErr, guestErr chan error) {
	drops = make([]*atomic.Int64, 2)
	client, backend, hostErr, guestErr = chainThrough(t,
		func(from io.Reader, to io.WriteCloser) { drops[0] = lossy(from, to, capacity) },
		func(from io.Reader, to io.WriteCloser) { drops[1] = lossy(from, to, capacity) })
	return client, backend, drops, hostErr, guestErr
}

// chainThrough is client ⇄ Host ⇄ a forwarder (toGuest, toHost start
// its two directions) ⇄ Guest ⇄ backend; it returns the client's and
// the backend's ends and where each side's error comes.
func chainThrough(t *testing.T, toGuest, toHost func(from io.Reader, to io.WriteCloser)) (client, backend *net.TCPConn, hostErr, guestErr chan error) {
	client, hostLocal := tcpPair(t)
	hostStream, fwdHost := tcpPair(t)
	fwdGuest, guestStream := tcpPair(t)
	guestLocal, backend := tcpPair(t)
	toGuest(fwdHost, fwdGuest)
	toHost(fwdGuest, fwdHost)
	hostErr, guestErr = make(chan error, 1), make(chan error, 1)
	go func() {
		if err := Hello(guestStream); err != nil {
			guestErr <- err
			return
		}
		guestErr <- Guest(guestLocal, guestStream)
	}()
	go func() { hostErr <- Host(hostLocal, hostStream, 5*time.Second) }()
	return client, backend, hostErr, guestErr
}

// waitEnds waits up to timeout for each side to end, and cleanly.
func waitEnds(t *testing.T, hostErr, guestErr chan error, timeout time.Duration) {
	t.Helper()
	for name, ch := range map[string]chan error{"host": hostErr, "guest": guestErr} {
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("%s side: %v", name, err)
			}
		case <-time.After(timeout):
			t.Fatalf("%s side did not end", name)
		}
	}
}

// TestNoLossThroughLossyForwarder: 16 MiB each way, read slowly on both
// ends, arrive intact through a forwarder that drops whatever exceeds
// 1 MiB unread (gVisor's, modelled), with both half-closes delivered in
// order and both sides ending cleanly.
func TestNoLossThroughLossyForwarder(t *testing.T) {
	client, backend, drops, hostErr, guestErr := chain(t, 1<<20)
	const size = 16 << 20
	data := make([]byte, size)
	rand.New(rand.NewSource(1)).Read(data)
	want := sha256.Sum256(data)

	type result struct {
		n   int64
		sum [32]byte
	}
	atBackend, atClient := make(chan result, 1), make(chan result, 1)
	go func() {
		n, s := slowCopy(backend, 2*time.Millisecond)
		atBackend <- result{n, s}
		// The backend answers after the client's half-close.
		if _, err := backend.Write(data); err != nil {
			t.Errorf("backend write: %v", err)
		}
		backend.CloseWrite()
	}()
	go func() {
		if _, err := client.Write(data); err != nil {
			t.Errorf("client write: %v", err)
		}
		client.CloseWrite()
		n, s := slowCopy(client, 2*time.Millisecond)
		atClient <- result{n, s}
	}()
	for name, ch := range map[string]chan result{"backend": atBackend, "client": atClient} {
		select {
		case r := <-ch:
			if r.n != size || r.sum != want {
				t.Errorf("%s read %d bytes (sha256 match %v), want %d", name, r.n, r.sum == want, size)
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s: timed out", name)
		}
	}
	for i, d := range drops {
		if d.Load() != 0 {
			t.Errorf("forwarder direction %d dropped %d bytes", i, d.Load())
		}
	}
	waitEnds(t, hostErr, guestErr, 30*time.Second)
}

// TestLossyForwarderDrops: the model does drop without the framing (so
// the test above can fail).
func TestLossyForwarderDrops(t *testing.T) {
	client, fwdIn := tcpPair(t)
	fwdOut, server := tcpPair(t)
	dropped := lossy(fwdIn, fwdOut, 1<<20)
	data := make([]byte, 32<<20) // well beyond what the kernel's socket buffers hold
	go func() {
		client.Write(data)
		client.CloseWrite()
	}()
	time.Sleep(200 * time.Millisecond)
	n, _ := slowCopy(server, time.Millisecond)
	if n == int64(len(data)) || dropped.Load() == 0 {
		t.Errorf("read %d of %d, dropped %d: the model did not drop", n, len(data), dropped.Load())
	}
}

// TestNoHello: a peer that is not gvx-relay (dockerd itself answering an
// HTTP request) is refused, with both connections closed.
func TestNoHello(t *testing.T) {
	client, hostLocal := tcpPair(t)
	hostStream, peer := tcpPair(t)
	go peer.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
	if err := Host(hostLocal, hostStream, 5*time.Second); err != ErrNoHello {
		t.Fatalf("Host: %v, want ErrNoHello", err)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("client read %d, %v: want EOF", n, err)
	}
}

// withholding copies from to to as gVisor's port forwarding does when it
// misses every wakeup: what a read returns is written only once the next
// read returns (or from ends, when to is closed).
func withholding(from io.Reader, to io.WriteCloser) {
	go func() {
		buf := make([]byte, 16<<10)
		var pending []byte
		for {
			n, err := from.Read(buf)
			if n > 0 {
				if pending != nil {
					to.Write(pending)
				}
				pending = append([]byte(nil), buf[:n]...)
			}
			if err != nil {
				if pending != nil {
					to.Write(pending)
				}
				to.Close()
				return
			}
		}
	}()
}

// TestNudgeThroughWithholdingForwarder: a request and its answer, the
// backend closing first, end at the client with the answer and EOF, and
// on both sides cleanly, though the forwarder holds back the relay's
// last frames until more come: the relay's nudges are what come.
func TestNudgeThroughWithholdingForwarder(t *testing.T) {
	client, backend, hostErr, guestErr := chainThrough(t,
		func(from io.Reader, to io.WriteCloser) { lossy(from, to, 1<<20) },
		withholding)
	go func() {
		buf := make([]byte, 5)
		if _, err := io.ReadFull(backend, buf); err != nil {
			t.Errorf("backend read: %v", err)
		}
		backend.Write([]byte("pong\n"))
		backend.Close()
	}()
	if _, err := client.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(client)
	if string(got) != "pong\n" || err != nil {
		t.Fatalf("client read %q, %v: want the answer, then EOF", got, err)
	}
	client.Close()
	waitEnds(t, hostErr, guestErr, 10*time.Second)
}

// TestRefused: a relay that did not reach dockerd refuses the stream and
// the shim closes the client's connection; the relay repeats its refusal
// (a nudge) and closes its end only after the shim closed (it is not the
// first to close).
func TestRefused(t *testing.T) {
	client, hostLocal := tcpPair(t)
	hostStream, guestStream := tcpPair(t)
	go Refuse(guestStream, 5*time.Second)
	if err := Host(hostLocal, hostStream, 5*time.Second); err != ErrRefused {
		t.Fatalf("Host: %v, want ErrRefused", err)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("client read %d, %v: want EOF", n, err)
	}

	shim, relayEnd := tcpPair(t)
	refused := make(chan struct{})
	go func() {
		Refuse(relayEnd, 5*time.Second)
		close(refused)
	}()
	buf := make([]byte, 2*headerLen)
	shim.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(shim, buf); err != nil || buf[0] != typeRefused || buf[headerLen] != typeRefused {
		t.Fatalf("the shim read %q, %v: want the refusal twice", buf, err)
	}
	select {
	case <-refused:
		t.Fatal("the relay closed its end before the shim")
	case <-time.After(100 * time.Millisecond):
	}
	shim.Close()
	select {
	case <-refused:
	case <-time.After(5 * time.Second):
		t.Fatal("Refuse did not return after the shim closed the stream")
	}
}

// TestAbort: the backend resetting its connection mid-stream ends both
// sides with an error and closes the client's connection.
func TestAbort(t *testing.T) {
	client, backend, _, hostErr, guestErr := chain(t, 1<<20)
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(backend, buf); err != nil || !bytes.Equal(buf, []byte("ping")) {
		t.Fatalf("backend read %q, %v", buf, err)
	}
	backend.SetLinger(0)
	backend.Close()
	if err := <-guestErr; err == nil {
		t.Error("guest side: no error after the backend's reset")
	}
	if err := <-hostErr; err == nil {
		t.Error("host side: no error after the guest's abort")
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(client); err != nil {
		t.Logf("client: %v", err)
	}
}
