package monitor

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
)

// serve answers one start request on root/id's socket with reply.
func serve(t *testing.T, root, id, reply string) <-chan string {
	t.Helper()
	ln, err := listen(SocketPath(root, id))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		defer ln.Close()
		conn, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer conn.Close()
		req, _ := bufio.NewReader(conn).ReadString('\n')
		got <- req
		fmt.Fprintln(conn, reply)
	}()
	return got
}

func TestRequestStart(t *testing.T) {
	root := t.TempDir()
	if Has(root, "c1") {
		t.Fatal("Has before the socket exists")
	}
	req := serve(t, root, "c1", "ok")
	if !Has(root, "c1") {
		t.Fatal("Has: no socket seen")
	}
	if err := RequestStart(root, "c1"); err != nil {
		t.Fatal(err)
	}
	if r := <-req; r != "start\n" {
		t.Errorf("request %q, want start", r)
	}
	serve(t, root, "c2", "error: sandbox gvxpool-1 is gone")
	if err := RequestStart(root, "c2"); err == nil || err.Error() != "sandbox gvxpool-1 is gone" {
		t.Errorf("refused start: err = %v", err)
	}
	if err := RequestStart(root, "c3"); err == nil || !strings.Contains(err.Error(), "monitor socket") {
		t.Errorf("no monitor: err = %v", err)
	}
}

func TestLongSocketPath(t *testing.T) {
	root := t.TempDir() + "/" + strings.Repeat("d", 90)
	if err := mkdir(root); err != nil {
		t.Fatal(err)
	}
	serve(t, root, "c1", "ok")
	if err := RequestStart(root, "c1"); err != nil {
		t.Fatalf("socket path of %d bytes: %v", len(SocketPath(root, "c1")), err)
	}
}

func mkdir(p string) error { return os.MkdirAll(p, 0o700) }
