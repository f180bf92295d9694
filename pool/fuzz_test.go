package pool

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/pool/client"
)

// socketPair is a connected pair of unix stream sockets.
func socketPair(t *testing.T) (a, b *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// FuzzServeConn: whatever a client sends, the pool server answers with
// one JSON response; it hands out a sandbox only for a well-formed claim
// of its class, and an empty pool hands out none.
func FuzzServeConn(f *testing.F) {
	for _, s := range []string{
		`{"class":"c1"}` + "\n", `{"class":"c2"}`, `{"status":true}`, `{"class":1}`, `{`, "", "\x00\xff",
		`{"class":"c1","status":false}{"class":"c1"}`, `[]`, `null`,
	} {
		f.Add([]byte(s), uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, ready uint8) {
		s := testServer(t, int(ready%3))
		cl, sv := socketPair(t)
		defer cl.Close()
		done := make(chan struct{})
		go func() { defer close(done); s.serveConn(context.Background(), sv) }()
		// The server reads one JSON value and answers: write the rest in
		// the background (it may never be read).
		go func() {
			_, _ = cl.Write(data)
			cl.CloseWrite()
		}()
		out, err := io.ReadAll(cl)
		if err != nil {
			t.Fatal(err)
		}
		<-done
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if len(lines) != 1 {
			t.Fatalf("answer to %q is %d lines: %q", data, len(lines), out)
		}
		var resp client.Response
		if err := json.NewDecoder(bufio.NewReader(strings.NewReader(lines[0]))).Decode(&resp); err != nil {
			t.Fatalf("answer %q to %q: %v", out, data, err)
		}
		var req client.Request
		wellFormed := json.NewDecoder(strings.NewReader(string(data))).Decode(&req) == nil
		switch {
		case !wellFormed:
			if resp.Code != client.CodeBadRequest || resp.Sandbox != nil {
				t.Fatalf("malformed claim %q answered %q", data, out)
			}
		case req.Status:
			if resp.Status == nil || resp.Sandbox != nil {
				t.Fatalf("status request %q answered %q", data, out)
			}
		case resp.Sandbox != nil:
			if req.Class != "c1" || ready%3 == 0 {
				t.Fatalf("claim %q of an empty pool or another class got sandbox %s", data, resp.Sandbox.ID)
			}
		default:
			if resp.Code != client.CodeNoSandbox {
				t.Fatalf("refused claim %q answered %q", data, out)
			}
		}
	})
}
