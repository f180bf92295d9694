// Package relay is the flow-controlled framing of proxied docker mode's
// connections. The shim hands each host connection to the Sentry, whose
// port forwarding (gVisor's runsc/boot/portforward) copies 16 KiB reads
// between the host fd and a netstack TCP endpoint and ignores how much of
// each read the other side's Write took: a guest endpoint whose send
// buffer is nearly full takes part of a chunk and the rest is dropped.
// So the shim and gvx-relay, a process in the guest that dockerd's
// connections go through, speak frames over the forwarded stream, and
// each side keeps at most Window bytes of data frames (charged with
// FrameCost each) unacknowledged: far less than the guest endpoint's send
// buffer (1 MiB) minus a chunk, so the Sentry's writes always take the
// whole chunk.
//
// A stream is a Hello frame from the relay (once it reached dockerd),
// then in either direction Data, Credit (the receiver delivered that
// much of the sender's data to its peer), EOF (the sender's peer
// half-closed) and, last from the relay, Done (it delivered everything
// and sends nothing more): the shim closes the stream only after Done,
// so gVisor's close of its endpoint finds no unread data (which would
// reset the connection and drop what the relay had yet to read). A relay
// that cannot reach dockerd sends Refused instead of Hello and waits for
// the shim to close: the relay is never the first to close a stream, so
// the guest keeps no TIME-WAIT endpoint of one (cmd/gvx-relay says why
// that matters to a restore).
//
// The forwarder also misses a wakeup now and then: it reads the guest's
// endpoint, and only when that finds nothing registers for readiness, so
// a frame that lands in between waits for the next event (≈ 1 session in
// 3000 lost its end so under load: the client had the answer, never its
// EOF). While the relay waits on the shim for what its frames ask for —
// a first frame after its Hello, credit for data in flight, the shim's
// EOF after its own, the close after its Done — it sends an empty Credit
// frame now and then (nudge), which is such an event; shims of any
// version take it.
package relay

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

const (
	// Window is the cost of data frames a side may have unacknowledged:
	// with a 16 KiB chunk of the forwarder's in flight besides, well
	// under the guest endpoint's 1 MiB send buffer.
	Window = 512 << 10
	// FrameCost is what a data frame is charged on top of its payload:
	// it bounds the frames (and so the host socket buffers' per-write
	// overhead) in flight to Window/FrameCost.
	FrameCost = 1 << 10
	// MaxPayload is the largest data frame's payload.
	MaxPayload = 32 << 10

	headerLen   = 8
	creditBatch = 64 << 10
	helloTag    = 0x67767831 // "gvx1"

	// nudgeFirst is the relay's first wait before a nudge; each nudge
	// that the shim has not answered doubles it, up to nudgeMax.
	nudgeFirst = 20 * time.Millisecond
	nudgeMax   = 2 * time.Second
)

// Frame types.
const (
	typeHello  byte = 'H'
	typeData   byte = 'D'
	typeCredit byte = 'C'
	typeEOF    byte = 'E'
	typeDone   byte = 'Z'
	// typeRefused stands in for Hello when the relay did not reach
	// dockerd. A shim that predates it takes it for a peer that is not
	// gvx-relay and closes too.
	typeRefused byte = 'R'
)

// HalfConn is a connection whose write side closes alone
// (*net.TCPConn, *net.UnixConn).
type HalfConn interface {
	net.Conn
	CloseWrite() error
}

// ErrNoHello is returned by Host when the stream's peer is not gvx-relay.
var ErrNoHello = errors.New("the guest's end of the docker socket is not gvx-relay (a sandbox made before gvx-relay: rebuild its checkpoint)")

// ErrRefused is returned by Host when gvx-relay could not reach dockerd
// (it is not listening yet, or no more).
var ErrRefused = errors.New("dockerd in the sandbox does not accept connections")

// Hello is the relay's first frame on an accepted stream.
func Hello(stream io.Writer) error {
	return writeFrame(stream, typeHello, helloTag, nil)
}

// Refuse ends an accepted stream whose backend did not answer: it sends
// Refused (again, as a nudge, while the shim has not closed), waits up to
// timeout for the shim to close the stream, and closes it.
func Refuse(stream net.Conn, timeout time.Duration) {
	defer stream.Close()
	end := time.Now().Add(timeout)
	buf := make([]byte, 512)
	for d := nudgeFirst; time.Now().Before(end); d = min(2*d, nudgeMax) {
		if writeFrame(stream, typeRefused, 0, nil) != nil {
			return
		}
		deadline := time.Now().Add(d)
		if deadline.After(end) {
			deadline = end
		}
		_ = stream.SetReadDeadline(deadline)
		for {
			if _, err := stream.Read(buf); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					break
				}
				return // the shim closed
			}
		}
	}
}

// Host runs the shim's side: it waits up to timeout for the relay's
// Hello on stream, then splices local (the host client) with it until
// both directions ended or either failed. It closes both.
func Host(local HalfConn, stream net.Conn, timeout time.Duration) error {
	_ = stream.SetReadDeadline(time.Now().Add(timeout))
	var h [headerLen]byte
	if _, err := io.ReadFull(stream, h[:]); err != nil {
		local.Close()
		stream.Close()
		return fmt.Errorf("wait for gvx-relay: %w", err)
	}
	if h[0] != typeHello || binary.BigEndian.Uint32(h[4:]) != helloTag {
		local.Close()
		stream.Close()
		if h[0] == typeRefused {
			return ErrRefused
		}
		return ErrNoHello
	}
	_ = stream.SetReadDeadline(time.Time{})
	return splice(local, stream, false)
}

// Guest runs the relay's side on an accepted stream once local (dockerd)
// is connected and Hello sent. It closes both.
func Guest(local HalfConn, stream net.Conn) error {
	return splice(local, stream, true)
}

func writeFrame(w io.Writer, typ byte, n uint32, payload []byte) error {
	buf := make([]byte, headerLen+len(payload))
	buf[0] = typ
	binary.BigEndian.PutUint32(buf[4:], n)
	copy(buf[headerLen:], payload)
	_, err := w.Write(buf)
	return err
}

// splicer is one stream's state.
type splicer struct {
	local  HalfConn
	stream net.Conn
	guest  bool // the relay's side: sends Done, waits for the stream's end

	in  *bufio.Reader // the stream's read side
	wmu sync.Mutex    // frames are written whole

	mu        sync.Mutex
	cond      *sync.Cond
	credit    int      // cost this side may still send
	queue     [][]byte // the peer's data, not yet delivered to local
	queued    int      // its cost
	peerEOF   bool     // the peer's EOF frame arrived
	peerDone  bool     // the relay's Done arrived (host side)
	sentEOF   bool     // local's read side ended and EOF was sent
	sentDone  bool     // the relay sent Done (guest side)
	streamEnd bool     // the stream's read side ended
	frames    int      // the peer's frames so far
	err       error    // the first failure
}

func splice(local HalfConn, stream net.Conn, guest bool) error {
	// Buffered reads: a syscall per frame header costs in the guest.
	s := &splicer{local: local, stream: stream, in: bufio.NewReaderSize(stream, 64<<10), guest: guest, credit: Window}
	s.cond = sync.NewCond(&s.mu)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); s.read() }()
	go func() { defer wg.Done(); s.deliver() }()
	go func() { defer wg.Done(); s.send() }()
	stop := make(chan struct{})
	if guest {
		wg.Add(1)
		go func() { defer wg.Done(); s.nudge(stop) }()
	}
	s.mu.Lock()
	for !s.finished() {
		s.cond.Wait()
	}
	err := s.err
	s.mu.Unlock()
	close(stop)
	local.Close()
	stream.Close()
	wg.Wait()
	return err
}

// finished says whether the stream is over (with s.mu held).
func (s *splicer) finished() bool {
	if s.err != nil {
		return true
	}
	delivered := s.peerEOF && len(s.queue) == 0
	if s.guest {
		// After Done the relay waits for the shim to close the stream.
		return s.sentEOF && delivered && s.streamEnd
	}
	return s.sentEOF && delivered && s.peerDone
}

func (s *splicer) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *splicer) write(typ byte, n uint32, payload []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return writeFrame(s.stream, typ, n, payload)
}

// read takes the peer's frames off the stream; it never blocks on local.
func (s *splicer) read() {
	var h [headerLen]byte
	for {
		if _, err := io.ReadFull(s.in, h[:]); err != nil {
			s.mu.Lock()
			s.streamEnd = true
			clean := s.peerDone // the host's end: after the relay's Done
			if s.guest {
				// The relay's: the shim closes after Done, which follows
				// both EOFs.
				clean = s.peerEOF && s.sentEOF
			}
			if s.err == nil && !clean {
				// The peer went away mid-stream: an abort.
				s.err = fmt.Errorf("stream ended: %w", err)
			}
			s.cond.Broadcast()
			s.mu.Unlock()
			return
		}
		n := binary.BigEndian.Uint32(h[4:])
		var payload []byte
		if h[0] == typeData {
			if n == 0 || n > MaxPayload {
				s.fail(fmt.Errorf("data frame of %d bytes", n))
				return
			}
			payload = make([]byte, n)
			if _, err := io.ReadFull(s.in, payload); err != nil {
				s.fail(fmt.Errorf("stream: %w", err))
				return
			}
		}
		s.mu.Lock()
		s.frames++
		var err error
		switch h[0] {
		case typeData:
			if s.peerEOF {
				err = fmt.Errorf("data after EOF")
			} else if s.queued += int(n) + FrameCost; s.queued > Window {
				err = fmt.Errorf("the peer exceeded its window (%d > %d)", s.queued, Window)
			}
			s.queue = append(s.queue, payload)
		case typeCredit:
			s.credit += int(n)
			if s.credit > Window {
				err = fmt.Errorf("credit beyond the window (%d > %d)", s.credit, Window)
			}
		case typeEOF:
			s.peerEOF = true
		case typeDone:
			if s.guest || !s.peerEOF {
				err = fmt.Errorf("unexpected done frame")
			}
			s.peerDone = true
		default:
			err = fmt.Errorf("unknown frame type %#x", h[0])
		}
		if err != nil && s.err == nil {
			s.err = err
		}
		s.cond.Broadcast()
		stop := s.err != nil
		s.mu.Unlock()
		if stop {
			return
		}
	}
}

// deliver writes the peer's data to local and credits it back.
func (s *splicer) deliver() {
	owed := 0 // cost delivered, not yet credited
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.peerEOF && s.err == nil {
			s.cond.Wait()
		}
		if s.err != nil {
			s.mu.Unlock()
			return
		}
		if len(s.queue) == 0 { // the peer's EOF, everything delivered
			s.mu.Unlock()
			if err := s.local.CloseWrite(); err != nil {
				s.fail(fmt.Errorf("half-close: %w", err))
				return
			}
			s.done()
			return
		}
		p := s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()
		if _, err := s.local.Write(p); err != nil {
			s.fail(fmt.Errorf("write: %w", err))
			return
		}
		owed += len(p) + FrameCost
		s.mu.Lock()
		s.queued -= len(p) + FrameCost
		// Credit in batches, or at once when nothing more is queued
		// (the peer may be waiting for it); after its EOF the peer sends
		// no data.
		credit := !s.peerEOF && (owed >= creditBatch || len(s.queue) == 0)
		s.mu.Unlock()
		if credit {
			if err := s.write(typeCredit, uint32(owed), nil); err != nil {
				s.fail(fmt.Errorf("stream: %w", err))
				return
			}
			owed = 0
		}
	}
}

// done sends the relay's Done once both directions ended.
func (s *splicer) done() {
	s.mu.Lock()
	for !s.sentEOF && s.err == nil {
		s.cond.Wait()
	}
	ok := s.err == nil
	s.mu.Unlock()
	if !ok {
		return
	}
	if s.guest {
		if err := s.write(typeDone, 0, nil); err != nil {
			s.fail(fmt.Errorf("stream: %w", err))
			return
		}
	}
	s.mu.Lock()
	s.sentDone = s.guest
	s.cond.Broadcast()
	s.mu.Unlock()
}

// nudge sends the relay's nudges (see the package comment) until stop:
// an empty Credit frame whenever the relay has waited d on the shim for
// a first frame, credit, its EOF or its close, d doubling while the shim
// sends nothing. A nudge that fails is no failure of the stream (the
// shim may just have closed it).
func (s *splicer) nudge(stop <-chan struct{}) {
	d := nudgeFirst
	seen := -1
	for {
		select {
		case <-stop:
			return
		case <-time.After(d):
		}
		s.mu.Lock()
		waiting := s.err == nil && (s.frames == 0 || s.credit < Window || s.sentEOF && !s.peerEOF || s.sentDone && !s.streamEnd)
		if s.frames != seen {
			seen, d = s.frames, nudgeFirst
		} else {
			d = min(2*d, nudgeMax)
		}
		s.mu.Unlock()
		if waiting {
			_ = s.write(typeCredit, 0, nil)
		}
	}
}

// send reads local and sends its data as the peer's credit allows.
func (s *splicer) send() {
	buf := make([]byte, MaxPayload)
	for {
		s.mu.Lock()
		for s.credit < FrameCost+MaxPayload && s.err == nil {
			s.cond.Wait()
		}
		ok := s.err == nil
		s.mu.Unlock()
		if !ok {
			return
		}
		n, err := s.local.Read(buf)
		if n > 0 {
			s.mu.Lock()
			s.credit -= n + FrameCost
			s.mu.Unlock()
			if werr := s.write(typeData, uint32(n), buf[:n]); werr != nil {
				s.fail(fmt.Errorf("stream: %w", werr))
				return
			}
		}
		if errors.Is(err, io.EOF) {
			if werr := s.write(typeEOF, 0, nil); werr != nil {
				s.fail(fmt.Errorf("stream: %w", werr))
				return
			}
			s.mu.Lock()
			s.sentEOF = true
			s.cond.Broadcast()
			s.mu.Unlock()
			return
		}
		if err != nil {
			s.fail(fmt.Errorf("read: %w", err))
			return
		}
	}
}
