package main

import (
	"bufio"
	"net"
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
