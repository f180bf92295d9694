package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// FuzzQuery: whatever a pool server answers, Query and Claim return a
// status or sandbox, or an error naming the socket; a no-sandbox code is
// always ErrNoSandbox.
func FuzzQuery(f *testing.F) {
	for _, s := range []string{
		`{"status":{"class":"c1","size":2,"ready":1}}` + "\n",
		`{"sandbox":{"id":"gvx-pool-a","dir":"/run/gvx/pool/x/gvx-pool-a","pid":1}}`,
		`{"error":"all 2 handed out","code":"no-sandbox"}`, `{"error":"boom","code":"internal"}`,
		`{"code":"no-sandbox"}`, `{}`, `null`, `{"sandbox":null}`, "", `{"status":`,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, answer []byte) {
		sock := filepath.Join(dir, fmt.Sprintf("%d.sock", n.Add(1)))
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for i := 0; i < 2; i++ {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				buf := make([]byte, 512)
				_, _ = c.Read(buf)
				_, _ = c.Write(answer)
				c.Close()
			}
		}()
		ctx := context.Background()
		st, err := Query(ctx, sock)
		if err == nil && st == nil {
			t.Fatalf("Query of answer %q: no status and no error", answer)
		}
		sb, err := Claim(ctx, sock, "c1", "t")
		if err == nil && sb == nil {
			t.Fatalf("Claim of answer %q: no sandbox and no error", answer)
		}
		var r Response
		if json.NewDecoder(bytes.NewReader(answer)).Decode(&r) == nil && r.Code == CodeNoSandbox && !errors.Is(err, ErrNoSandbox) {
			t.Fatalf("no-sandbox answer %q gave %v", answer, err)
		}
	})
}
