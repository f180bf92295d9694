package integration

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/rollout"
)

// netnsPair makes two network namespaces joined by a veth pair, a (the
// sandbox's, 10.213.0.1/24) and b (a peer, 10.213.0.2/24), removed at
// cleanup; it returns a's path.
func netnsPair(t *testing.T, name string) string {
	t.Helper()
	a, b := name+"a", name+"b"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", a).Run()
		_ = exec.Command("ip", "netns", "del", b).Run()
	})
	run("netns", "add", a)
	run("netns", "add", b)
	run("link", "add", "gvxv"+name, "netns", a, "type", "veth", "peer", "name", "gvxp"+name, "netns", b)
	run("-n", a, "addr", "add", "10.213.0.1/24", "dev", "gvxv"+name)
	run("-n", b, "addr", "add", "10.213.0.2/24", "dev", "gvxp"+name)
	for _, ns := range []string{a, b} {
		run("-n", ns, "link", "set", "lo", "up")
	}
	run("-n", a, "link", "set", "gvxv"+name, "up")
	run("-n", b, "link", "set", "gvxp"+name, "up")
	return "/var/run/netns/" + a
}

// TestRolloutOutsideTCP: a sandbox holding a TCP connection to a peer
// outside it (a server in a network namespace the test made) is refused
// a checkpoint naming the peer, and runs on; once the connection is
// closed the checkpoint is taken. A sandbox with loopback only is not
// asked (no exec).
func TestRolloutOutsideTCP(t *testing.T) {
	checkNoLeaks(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("iproute2 not installed")
	}
	nsA := netnsPair(t, "ck")
	// The peer: a server in namespace b that holds each connection open;
	// it says "listening" once it does (the guest's nc tries once).
	srv := exec.Command("ip", "netns", "exec", "ckb", "python3", "-c", `
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.213.0.2", 8080)); s.listen(8)
print("listening", flush=True)
conns = []
while True:
    c, _ = s.accept(); conns.append(c)
    print("accepted", flush=True)
`)
	srvOut, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	srvLines := bufio.NewScanner(srvOut)
	if !srvLines.Scan() || srvLines.Text() != "listening" {
		t.Fatalf("the peer server did not start: %q %v", srvLines.Text(), srvLines.Err())
	}
	accepted := make(chan struct{}, 8)
	go func() {
		for srvLines.Scan() {
			accepted <- struct{}{}
		}
	}()
	eng, ctx, _ := rolloutEnv(t, 0)
	sb := adoptRunning(t, eng, ctx, "cktcp", []string{"--with-ns", "network:" + nsA}, "sh", "-c", "while true; do sleep 0.1; done")
	id := current(sb)
	// The guest's connection out: nc holding it open in the background.
	inTask(t, id, "(sleep 100000 | nc 10.213.0.2 8080) </dev/null >/tmp/nc.out 2>&1 & true")
	select {
	case <-accepted:
	case <-time.After(20 * time.Second):
		t.Fatalf("the peer accepted no connection from the guest in 20 s; the guest's TCP table, processes and nc's output:\n%s",
			inTaskQuiet(id, "cat /proc/net/tcp; ps; cat /tmp/nc.out"))
	}
	waitFor(t, "the guest's connection", func() bool {
		return strings.Contains(inTaskQuiet(id, "cat /proc/net/tcp"), " 0200D50A:1F90 01 ")
	})
	_, err = eng.Checkpoint(ctx, sb)
	if !errors.Is(err, rollout.ErrNotCheckpointable) || !strings.Contains(err.Error(), "10.213.0.2:8080") {
		t.Fatalf("checkpoint with a connection out: %v, want ErrNotCheckpointable naming 10.213.0.2:8080", err)
	}
	if got := strings.TrimSpace(inTask(t, id, "echo alive")); got != "alive" {
		t.Errorf("after the refusal: %q", got)
	}
	if hs, _ := eng.Store().List(); len(hs) != 0 {
		t.Errorf("a refused checkpoint left handles: %v", hs)
	}
	// The same through containerd: ctr c checkpoint is refused by the shim.
	r, err := e.ctrResult(ctx, "container", "checkpoint", "--task", id, "gvx.test/cktcp:1")
	if err != nil {
		t.Fatal(err)
	}
	if r.code == 0 || !strings.Contains(r.stderr, "10.213.0.2:8080") {
		t.Errorf("ctr c checkpoint with a connection out: exit %d, %q; want it refused naming 10.213.0.2:8080", r.code, r.stderr)
	}
	if st := taskStatus(t, id); st != "RUNNING" {
		t.Errorf("%s is %s after the refused ctr checkpoint, want RUNNING", id, st)
	}
	inTask(t, id, "killall nc; true")
	waitFor(t, "the connection's end", func() bool {
		return !strings.Contains(inTaskQuiet(id, "cat /proc/net/tcp"), " 0200D50A:1F90 01 ")
	})
	t0 := time.Now()
	if _, err := eng.Checkpoint(ctx, sb); err != nil {
		t.Fatalf("checkpoint after the connection closed: %v", err)
	}
	t.Logf("checkpoint of a sandbox with an interface (asked for its connections): %v", time.Since(t0))
	// And containerd's, of the task it paused, once the connection is gone.
	mustCtr(t, "container", "checkpoint", "--task", id, "gvx.test/cktcp:1")
	mustCtr(t, "image", "rm", "gvx.test/cktcp:1")
	if st := taskStatus(t, id); st != "RUNNING" {
		t.Errorf("%s is %s after ctr's checkpoint, want RUNNING", id, st)
	}
}
