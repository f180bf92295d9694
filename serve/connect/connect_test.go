package connect

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

type ping struct {
	N int `json:"n"`
}

func envelope(flags byte, b []byte) []byte {
	var out bytes.Buffer
	out.WriteByte(flags)
	_ = binary.Write(&out, binary.BigEndian, uint32(len(b)))
	out.Write(b)
	return out.Bytes()
}

// frames splits a stream's body into envelopes.
func frames(t *testing.T, r io.Reader) (flags []byte, msgs []string) {
	t.Helper()
	for {
		var h [5]byte
		if _, err := io.ReadFull(r, h[:]); err == io.EOF {
			return
		} else if err != nil {
			t.Fatal(err)
		}
		m := make([]byte, binary.BigEndian.Uint32(h[1:]))
		if _, err := io.ReadFull(r, m); err != nil {
			t.Fatal(err)
		}
		flags = append(flags, h[0])
		msgs = append(msgs, string(m))
	}
}

func TestServerStream(t *testing.T) {
	h := ServerStream(func(_ context.Context, _ *http.Request, req *ping, s *Stream[ping]) error {
		for i := 1; i <= req.N; i++ {
			if err := s.Send(&ping{N: i}); err != nil {
				return err
			}
		}
		if req.N == 2 {
			return Errorf(NotFound, "no third")
		}
		return nil
	})
	for _, c := range []struct {
		n    int
		msgs []string
		end  string
	}{
		{1, []string{`{"n":1}`}, `{}`},
		{2, []string{`{"n":1}`, `{"n":2}`}, `{"error":{"code":"not_found","message":"no third"}}`},
	} {
		b, _ := json.Marshal(ping{N: c.n})
		req := httptest.NewRequest("POST", "/x", bytes.NewReader(envelope(0, b)))
		req.Header.Set("Content-Type", "application/connect+json")
		w := httptest.NewRecorder()
		h(w, req)
		if w.Code != 200 || w.Header().Get("Content-Type") != "application/connect+json" {
			t.Fatalf("status %d, type %q", w.Code, w.Header().Get("Content-Type"))
		}
		if !w.Flushed {
			t.Error("stream not flushed")
		}
		flags, msgs := frames(t, w.Body)
		if len(msgs) != len(c.msgs)+1 || flags[len(flags)-1] != flagEndStream || msgs[len(msgs)-1] != c.end {
			t.Fatalf("n=%d: flags %v msgs %q", c.n, flags, msgs)
		}
		for i, m := range c.msgs {
			if flags[i] != 0 || msgs[i] != m {
				t.Fatalf("n=%d: message %d = %q (flags %d), want %q", c.n, i, msgs[i], flags[i], m)
			}
		}
	}
}

func TestServerStreamBadRequests(t *testing.T) {
	h := ServerStream(func(context.Context, *http.Request, *ping, *Stream[ping]) error { return nil })
	for _, c := range []struct {
		name, ct string
		body     []byte
		status   int
		end      string
	}{
		{"binary codec", "application/connect+proto", envelope(0, nil), 415, ""},
		{"compressed", "application/connect+json", envelope(flagCompressed, []byte("x")), 200, "unimplemented"},
		{"short", "application/connect+json", []byte{0, 0}, 200, "invalid_argument"},
		{"malformed", "application/connect+json", envelope(0, []byte("{nope")), 200, "malformed JSON"},
		{"oversize", "application/connect+json", []byte{0, 0xff, 0xff, 0xff, 0xff}, 200, "resource_exhausted"},
	} {
		req := httptest.NewRequest("POST", "/x", bytes.NewReader(c.body))
		req.Header.Set("Content-Type", c.ct)
		w := httptest.NewRecorder()
		h(w, req)
		if w.Code != c.status {
			t.Errorf("%s: status %d, want %d", c.name, w.Code, c.status)
			continue
		}
		if c.end != "" {
			flags, msgs := frames(t, w.Body)
			if len(msgs) != 1 || flags[0] != flagEndStream || !strings.Contains(msgs[0], c.end) {
				t.Errorf("%s: %v %q, want an end-stream with %q", c.name, flags, msgs, c.end)
			}
		}
	}
}

func TestUnary(t *testing.T) {
	h := Unary(func(_ context.Context, _ *http.Request, req *ping) (*ping, error) {
		switch req.N {
		case 0:
			return nil, errors.New("plain failure")
		case 1:
			return nil, Errorf(AlreadyExists, "one exists")
		case 2:
			return nil, context.DeadlineExceeded
		}
		return &ping{N: req.N * 2}, nil
	})
	for _, c := range []struct {
		body, ct string
		status   int
		want     string
	}{
		{`{"n":21}`, "application/json", 200, `{"n":42}`},
		{`{"n":1}`, "application/json", 409, `{"code":"already_exists","message":"one exists"}`},
		{`{"n":0}`, "application/json; charset=utf-8", 500, `{"code":"internal","message":"plain failure"}`},
		{`{"n":2}`, "application/json", 504, `"code":"deadline_exceeded"`},
		{`{"n":`, "application/json", 400, `"code":"invalid_argument"`},
		{`{}`, "application/proto", 415, "JSON codec only"},
	} {
		req := httptest.NewRequest("POST", "/x", strings.NewReader(c.body))
		req.Header.Set("Content-Type", c.ct)
		w := httptest.NewRecorder()
		h(w, req)
		if w.Code != c.status || !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("%s: %d %s, want %d with %s", c.body, w.Code, w.Body, c.status, c.want)
		}
	}
}

func TestTimeout(t *testing.T) {
	r := httptest.NewRequest("POST", "/x", nil)
	if _, ok, err := Timeout(r); ok || err != nil {
		t.Fatalf("no header: %v %v", ok, err)
	}
	r.Header.Set("Connect-Timeout-Ms", "1500")
	if d, ok, err := Timeout(r); !ok || err != nil || d != 1500*time.Millisecond {
		t.Fatalf("1500: %v %v %v", d, ok, err)
	}
	r.Header.Set("Connect-Timeout-Ms", "-3")
	if _, _, err := Timeout(r); err == nil {
		t.Fatal("negative timeout accepted")
	}
}
