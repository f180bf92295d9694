package gvx

import (
	"io"
	"sync"
)

// stdinStream is a process's stdin as containerd's IO copies it: the
// caller's reader, pumped through a pipe that Close can end while the
// reader is still open. containerd's CloseIO alone closes only the shim's
// end; the client's FIFO stays open while its copy waits in the caller's
// Read, and the process never sees EOF (an io.Pipe the caller has not
// closed, a terminal).
//
// The stream ends — once — at the reader's EOF or error, or at Close;
// closeIO then tells the shim.
type stdinStream struct {
	pr      *io.PipeReader
	pw      *io.PipeWriter
	closeIO func() error
	once    sync.Once
	err     error
}

func newStdinStream(r io.Reader, closeIO func() error) *stdinStream {
	pr, pw := io.Pipe()
	s := &stdinStream{pr: pr, pw: pw, closeIO: closeIO}
	go func() {
		// A Read under way when Close comes is waited for and its bytes
		// dropped (the pipe is closed): nothing can interrupt it.
		_, err := io.Copy(pw, r)
		pw.CloseWithError(err)
	}()
	return s
}

func (s *stdinStream) Read(p []byte) (int, error) {
	n, err := s.pr.Read(p)
	if err != nil {
		go s.finish()
	}
	return n, err
}

func (s *stdinStream) finish() error {
	s.once.Do(func() { s.err = s.closeIO() })
	return s.err
}

// Close ends the stream now: the process reads EOF.
func (s *stdinStream) Close() error {
	s.pw.Close()
	return s.finish()
}

// release ends the copy into containerd's FIFO once the process is gone
// (the shim's CloseIO that may follow finds nothing to close, harmlessly).
// It does not wait for a closeIO under way: its caller may hold what
// closeIO needs.
func (s *stdinStream) release() { s.pw.Close() }
