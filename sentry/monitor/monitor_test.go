package monitor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
)

// serve answers one start request on root/id's socket with reply.
func serve(t *testing.T, root, id, reply string) <-chan string {
	t.Helper()
	ln, err := listen(api.SentryRoot(root).MonitorSocket(id))
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
		t.Fatalf("socket path of %d bytes: %v", len(api.SentryRoot(root).MonitorSocket("c1")), err)
	}
}

func mkdir(p string) error { return os.MkdirAll(p, 0o700) }

func TestRequestsWithFiles(t *testing.T) {
	root := t.TempDir()
	ln, err := listen(api.SentryRoot(root).MonitorSocket("t1"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 4)
	go func() {
		conn, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer conn.Close()
		r := bufio.NewReader(strings.NewReader(""))
		for n := 1; ; n++ {
			req, files, err := Receive(conn, r)
			if err != nil {
				return
			}
			got <- fmt.Sprintf("%s %d %d files", req.Op, req.Pid, len(files))
			for _, f := range files {
				f.Close()
			}
			if n == 3 {
				return // hangs up on the third
			}
			reply := `{"pid":42}`
			if req.Op == OpSignal {
				reply = `{"error":"no such process"}`
			}
			conn.Write([]byte(reply + "\n"))
		}
	}()
	conn, err := Dial(root, "t1")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reply, err := Send(conn, Request{Op: OpExec, Pid: 0}, f, f, f)
	if err != nil || reply.Pid != 42 {
		t.Fatalf("exec: %+v, %v", reply, err)
	}
	if g := <-got; g != "exec 0 3 files" {
		t.Errorf("monitor got %q", g)
	}
	if _, err := Send(conn, Request{Op: OpSignal, Pid: 7, Signal: 15}); err == nil || err.Error() != "no such process" || errors.Is(err, ErrGone) {
		t.Errorf("signal: err = %v", err)
	}
	if g := <-got; g != "signal 7 0 files" {
		t.Errorf("monitor got %q", g)
	}
	// The monitor hangs up on the next request.
	if _, err := Send(conn, Request{Op: OpSignal, Pid: 7, Signal: 15}); !errors.Is(err, ErrGone) {
		t.Errorf("signal to a monitor that hung up: err = %v, want ErrGone", err)
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]unix.Signal{"9": unix.SIGKILL, "15": unix.SIGTERM, "TERM": unix.SIGTERM, "sigusr1": unix.SIGUSR1, "SIGHUP": unix.SIGHUP} {
		if got, err := ParseSignal(in); err != nil || got != want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "65", "-1", "NOPE", ""} {
		if _, err := ParseSignal(in); err == nil {
			t.Errorf("ParseSignal(%q) accepted", in)
		}
	}
}

func TestServeStart(t *testing.T) {
	root := t.TempDir()
	ln, err := listen(api.SentryRoot(root).MonitorSocket("t1"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		exit int
		err  error
	}
	serve := func(start func() error, waiting func() (int, bool)) <-chan result {
		done := make(chan result, 1)
		go func() {
			exit, err := ServeStart(ln, start, waiting)
			done <- result{exit, err}
		}()
		return done
	}
	waits := func() (int, bool) { return 0, true }

	// An unknown request is answered and the monitor waits on; a start
	// that succeeds ends it.
	starts := 0
	done := serve(func() error { starts++; return nil }, waits)
	conn, err := Dial(root, "t1")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(conn, "stop")
	if reply, _ := bufio.NewReader(conn).ReadString('\n'); reply != "error: unknown request \"stop\"\n" {
		t.Errorf("unknown request answered %q", reply)
	}
	conn.Close()
	if err := RequestStart(root, "t1"); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.exit != 0 || r.err != nil || starts != 1 {
		t.Errorf("started: ServeStart = %d, %v after %d starts", r.exit, r.err, starts)
	}

	// A start that fails is answered with its error, which ends it.
	failed := errors.New("sandbox gvxpool-1 is gone")
	done = serve(func() error { return failed }, waits)
	if err := RequestStart(root, "t1"); err == nil || err.Error() != failed.Error() {
		t.Errorf("failed start: RequestStart = %v", err)
	}
	if r := <-done; !errors.Is(r.err, failed) {
		t.Errorf("failed start: ServeStart = %d, %v", r.exit, r.err)
	}

	// A task that waits no longer ends it with waiting's status.
	polls := 0
	done = serve(func() error { t.Error("started"); return nil }, func() (int, bool) {
		polls++
		return 137, polls < 2
	})
	if r := <-done; r.exit != 137 || !errors.Is(r.err, ErrNotWaiting) || polls != 2 {
		t.Errorf("not waiting: ServeStart = %d, %v after %d polls", r.exit, r.err, polls)
	}
}
