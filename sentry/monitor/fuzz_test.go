package monitor

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func fuzzPair(t *testing.T) (a, b *net.UnixConn) {
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

// FuzzAnswerStart: the monitor starts its container only for a "start"
// line, and answers every complete line with one line.
func FuzzAnswerStart(f *testing.F) {
	for _, s := range []string{"start\n", " start \r\n", "start", "stop\n", "\n", "start\nstart\n", "\x00start\n", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cl, sv := fuzzPair(t)
		defer cl.Close()
		// answerStart reads one line: write the rest in the background.
		go func() {
			_, _ = cl.Write(data)
			cl.CloseWrite()
		}()
		started := 0
		done, err := answerStart(sv, func() error { started++; return nil })
		out, _ := io.ReadAll(cl)
		line, complete := "", false
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, complete = string(data[:i]), true
		}
		want := complete && strings.TrimSpace(line) == "start"
		if done != want || (started == 1) != want || err != nil {
			t.Fatalf("answerStart(%q): done %v started %d err %v, want started %v", data, done, started, err, want)
		}
		switch {
		case want && string(out) != "ok\n":
			t.Fatalf("answerStart(%q) answered %q, want ok", data, out)
		case !want && complete && !strings.HasPrefix(string(out), "error: unknown request"):
			t.Fatalf("answerStart(%q) answered %q, want an error", data, out)
		case !complete && len(out) != 0:
			t.Fatalf("answerStart(%q) answered %q to an incomplete line", data, out)
		}
	})
}

// FuzzReceive: whatever a client writes to a monitor socket, Receive
// returns requests or an error and never files it was not sent.
func FuzzReceive(f *testing.F) {
	for _, s := range []string{
		`{"op":"exec","process":{"args":["sh"],"cwd":"/"}}` + "\n",
		`{"op":"signal","pid":3,"signal":9}` + "\n" + `{"op":"wait","pid":3}` + "\n",
		`{"op":"exec","process":{"args":`, "\n", `{"pid":"x"}` + "\n", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cl, sv := fuzzPair(t)
		defer cl.Close()
		defer sv.Close()
		go func() {
			_, _ = cl.Write(data)
			cl.CloseWrite()
		}()
		r := bufio.NewReader(sv)
		for i := 0; ; i++ {
			_, files, err := Receive(sv, r)
			if err != nil {
				break
			}
			if len(files) != 0 || i > len(data) {
				t.Fatalf("Receive(%q): %d files on request %d", data, len(files), i)
			}
		}
	})
}

// FuzzRead: a monitor's reply is a Reply or an error, never a panic; an
// error field is always an error.
func FuzzRead(f *testing.F) {
	for _, s := range []string{`{"pid":3,"control":"/x"}` + "\n", `{"status":256}` + "\n", `{"error":"boom"}` + "\n", `{"error":""}` + "\n", "{", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cl, sv := fuzzPair(t)
		defer cl.Close()
		go func() {
			_, _ = sv.Write(data)
			sv.Close()
		}()
		reply, err := Read(cl)
		if (reply == nil) == (err == nil) {
			t.Fatalf("Read(%q) = %v, %v", data, reply, err)
		}
		if reply != nil && reply.Error != "" {
			t.Fatalf("Read(%q) returned a reply carrying error %q", data, reply.Error)
		}
	})
}

// FuzzParseSignal: an accepted signal is in 1..64.
func FuzzParseSignal(f *testing.F) {
	for _, s := range []string{"9", "SIGKILL", "term", "0", "-1", "65", "SIGRTMIN", "sigfoo", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sig, err := ParseSignal(s)
		if err == nil && (sig < 1 || sig > 64) {
			t.Fatalf("ParseSignal(%q) = %d", s, sig)
		}
	})
}
