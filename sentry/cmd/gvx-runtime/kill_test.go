package main

import (
	"bufio"
	"net"
	"os"
	"strings"
	"testing"

	"gvisor.dev/gvisor/runsc/boot"
	"gvisor.dev/gvisor/runsc/container"

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

// TestKillPid: `kill --pid N` (the shim's SIGKILL or SIGSTOP of an exec)
// goes to the container's monitor, or over a root container's control
// socket (gVisor's urpc server decodes it); a refusal, a task and a
// container with neither go to gvx-sentry.
func TestKillPid(t *testing.T) {
	if pid, rest, ok := pidFlag([]string{"--pid=7", "c1", "9"}); !ok || pid != 7 || len(rest) != 2 {
		t.Errorf("--pid=7: %d %q %v", pid, rest, ok)
	}
	for _, bad := range [][]string{{"--pid"}, {"--pid", "x", "c1"}, {"--pid", "0", "c1"}, {"c1", "9"}} {
		if _, _, ok := pidFlag(bad); ok {
			t.Errorf("pidFlag(%q) taken", bad)
		}
	}
	for _, tc := range []struct {
		name, answer string
		handled      bool
	}{
		{"signalled", `{}`, true},
		{"refused", `{"error": "signal 9 to 42: no such process"}`, false},
	} {
		root := t.TempDir()
		got := fakeMonitor(t, root, "c1", tc.answer)
		handled, err := command{root: root, sub: "kill", args: []string{"--pid", "42", "c1", "KILL"}}.kill()
		if handled != tc.handled || err != nil {
			t.Errorf("%s: handled %v, %v; want %v", tc.name, handled, err, tc.handled)
		}
		if req := <-got; !strings.Contains(req, `"pid":42`) || !strings.Contains(req, `"signal":9`) || strings.Contains(req, `"all"`) {
			t.Errorf("%s: monitor got %q", tc.name, req)
		}
	}

	// A sandbox's root container: over its control socket.
	cm := &containerManager{signals: make(chan boot.SignalArgs, 1)}
	ctl := controlServer(t, cm)
	root := t.TempDir()
	saveRoot(t, root, "sb", "sb", os.Getpid(), container.Running, ctl)
	c := command{root: root, sub: "kill", args: []string{"--pid", "42", "sb", "STOP"}}
	if handled, err := c.kill(); !handled || err != nil {
		t.Fatalf("root container: handled %v, %v", handled, err)
	}
	if got := <-cm.signals; got.CID != "sb" || got.PID != 42 || got.Signo != 19 || got.Mode != boot.DeliverToProcess {
		t.Errorf("root container's signal %+v", got)
	}
	c.args = []string{"--pid", "666", "sb", "9"}
	if handled, _ := c.kill(); handled {
		t.Error("a signal the sandbox refused: taken")
	}
	c.args = []string{"--pid", "42", "none", "9"}
	if handled, _ := c.kill(); handled {
		t.Error("no such container: taken")
	}
	if err := (&record.Record{ID: "t1", Sandbox: "sb", Bundle: "/b", Pid: 7}).Save(root); err != nil {
		t.Fatal(err)
	}
	c.args = []string{"--pid", "42", "t1", "9"}
	if handled, _ := c.kill(); handled {
		t.Error("a task: taken")
	}
}
