package main

import (
	"bufio"
	"net"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/exectask/record"
)

// TestKillWhenTheMonitorHangsUp: a monitor that hangs up has exited with
// the task's process, so the kill reports api.NotRunning.
func TestKillWhenTheMonitorHangsUp(t *testing.T) {
	root := t.TempDir()
	if err := (&record.Record{ID: "t1", Sandbox: "sb", Bundle: "/b", Pid: 7}).Save(root); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", api.SentryRoot(root).MonitorSocket("t1"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = bufio.NewReader(conn).ReadString('\n')
		conn.Close()
	}()
	c := command{globals: []string{"gvx-runtime"}, root: root, sub: "kill", args: []string{"t1", "9"}}
	handled, err := c.kill()
	if !handled || err == nil || !strings.Contains(err.Error(), api.NotRunning) {
		t.Errorf("kill: handled %v, err %v; want an error saying %q", handled, err, api.NotRunning)
	}
}
