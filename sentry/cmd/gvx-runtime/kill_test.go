package main

import (
	"bufio"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/exectask/record"
)

// hangingMonitor records started task id in root with a monitor that hangs
// up on its first request, and returns gvx-runtime's kill of it.
func hangingMonitor(t *testing.T, root, id string) command {
	t.Helper()
	if err := (&record.Record{ID: id, Sandbox: "sb", Bundle: "/b", Pid: 7}).Save(root); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", api.SentryRoot(root).MonitorSocket(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = bufio.NewReader(conn).ReadString('\n')
		conn.Close()
	}()
	return command{globals: []string{"gvx-runtime"}, root: root, sub: "kill", args: []string{id, "9"}}
}

// TestKillWhenTheMonitorHangsUp: a monitor that hangs up has exited with
// the task's process, so the kill reports api.NotRunning.
func TestKillWhenTheMonitorHangsUp(t *testing.T) {
	handled, err := hangingMonitor(t, t.TempDir(), "t1").kill()
	if !handled || err == nil || !strings.Contains(err.Error(), api.NotRunning) {
		t.Errorf("kill: handled %v, err %v; want an error saying %q", handled, err, api.NotRunning)
	}
}

// fakeMonitor serves one connection on container id's monitor socket in
// root with answer (a line) and sends the request it read on got.
func fakeMonitor(t *testing.T, root, id, answer string) <-chan string {
	t.Helper()
	ln, err := net.Listen("unix", api.SentryRoot(root).MonitorSocket(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		req, _ := bufio.NewReader(conn).ReadString('\n')
		got <- req
		_, _ = conn.Write([]byte(answer + "\n"))
	}()
	return got
}

// TestKillContainer: a container's kill (no task record) goes to its
// monitor — its init, or with --all every process; a monitor still
// waiting for start (it answers no JSON) leaves the kill to gvx-sentry;
// with no monitor, `kill --all` of a container marked ended is done, and
// anything else is gvx-sentry's.
func TestKillContainer(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		args         []string
		handled      bool
		want         string // in the request
	}{
		{"init", `{}`, []string{"c1", "TERM"}, true, `"signal":15`},
		{"all", `{}`, []string{"--all", "c1", "9"}, true, `"all":true`},
		{"waiting for start", `error: unknown request`, []string{"--all", "c1", "9"}, false, `"op":"signal"`},
	} {
		root := t.TempDir()
		got := fakeMonitor(t, root, "c1", tc.answer)
		handled, err := command{root: root, sub: "kill", args: tc.args}.kill()
		if handled != tc.handled || err != nil {
			t.Errorf("%s: handled %v, err %v; want %v, nil", tc.name, handled, err, tc.handled)
		}
		if req := <-got; !strings.Contains(req, tc.want) {
			t.Errorf("%s: monitor got %q, want %s in it", tc.name, req, tc.want)
		}
	}
	root := t.TempDir()
	for _, tc := range []struct {
		name, mark string
		args       []string
		handled    bool
	}{
		{"ended", api.MonitorEndedMark, []string{"--all", "c2", "9"}, true},
		{"ended, not --all", api.MonitorEndedMark, []string{"c2", "9"}, false},
		{"monitor running when gone", "", []string{"--all", "c2", "9"}, false},
	} {
		if err := os.WriteFile(api.SentryRoot(root).MonitorEnded("c2"), []byte(tc.mark), 0o644); err != nil {
			t.Fatal(err)
		}
		handled, err := command{root: root, sub: "kill", args: tc.args}.kill()
		if handled != tc.handled || err != nil {
			t.Errorf("%s: handled %v, err %v; want %v, nil", tc.name, handled, err, tc.handled)
		}
	}
}
