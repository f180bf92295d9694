package connect

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

type fuzzMsg struct {
	Name string            `json:"name"`
	N    []int             `json:"n"`
	M    map[string]string `json:"m"`
}

// FuzzUnaryAndStream feeds raw HTTP requests to a unary and a server
// stream handler: a call reaches the handler only as a POST of the JSON
// codec with a message that decodes, and every answer is a Connect answer
// (a JSON error or the handler's message; a stream's end message).
func FuzzUnaryAndStream(f *testing.F) {
	env := func(b string) string {
		var h [5]byte
		h[4] = byte(len(b))
		return string(h[:]) + b
	}
	for _, s := range []string{
		"POST /u HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"name\":\"abc\"}",
		"POST /u HTTP/1.1\r\nHost: x\r\nContent-Type: application/json; charset=utf-8\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}",
		"GET /u HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /s HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\nConnect-Timeout-Ms: 100\r\nContent-Length: 17\r\n\r\n" + env(`{"name":"x"}`),
		"POST /s HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\nContent-Length: 5\r\n\r\n\x01\x00\x00\x00\x00",
		"POST /s HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\nContent-Length: 5\r\n\r\n\x00\xff\xff\xff\xff",
	} {
		f.Add([]byte(s))
	}
	mux := http.NewServeMux()
	called := false
	mux.Handle("/u", Unary(func(_ context.Context, _ *http.Request, req *fuzzMsg) (*fuzzMsg, error) {
		called = true
		return req, nil
	}))
	mux.Handle("/s", ServerStream(func(_ context.Context, _ *http.Request, req *fuzzMsg, s *Stream[fuzzMsg]) error {
		called = true
		if err := s.Send(req); err != nil {
			return err
		}
		if req.Name == "fail" {
			return Errorf(Internal, "failed")
		}
		return nil
	}))
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return
		}
		called = false
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if called && r.Method != http.MethodPost {
			t.Fatalf("%s reached the handler", r.Method)
		}
		if r.URL.Path == "/u" && w.Code == http.StatusOK {
			var m fuzzMsg
			if !called || json.Unmarshal(w.Body.Bytes(), &m) != nil {
				t.Fatalf("unary 200 without a call or a JSON message: %q", w.Body)
			}
		}
		if r.URL.Path == "/s" && w.Code == http.StatusOK {
			// The last envelope is the end message.
			b := w.Body.Bytes()
			var last []byte
			for len(b) >= 5 {
				n := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4])
				if len(b) < 5+n {
					t.Fatalf("stream envelope of %d bytes cut short: %q", n, w.Body)
				}
				last, b = b[:5+n], b[5+n:]
			}
			if len(b) != 0 || last == nil || last[0]&flagEndStream == 0 {
				t.Fatalf("stream answer does not end with an end message: %q", w.Body)
			}
		}
	})
}
