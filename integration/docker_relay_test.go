package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
)

// relayBytes is what TestDockerSocketFlowControl sends each way: many
// times the guest network stack's TCP send buffer (1 MiB).
const relayBytes = 16 << 20

// relayInit is the init of TestDockerSocketFlowControl's docker-mode
// sandbox: no dockerd, but busybox nc on the address the image's init is
// told to serve dockerd on (GVX_DOCKER_TCP). First it takes one
// connection and reads it slowly (the pipe's reader sleeps before
// reading: the guest's receive window closes while the host still
// writes), counting the bytes into /tmp/in; its stdin never ends (nc
// would half-close its connection at the end of its stdin, and gVisor's
// port forwarding closes both directions on either's end). Then it sends
// relayBytes on the next connection.
const relayInit = `port=${GVX_DOCKER_TCP##*:}
echo "$port" >/tmp/port
mkfifo /tmp/never
exec 3<>/tmp/never
nc -l -p "$port" <&3 | { sleep 3; wc -c >/tmp/in.tmp; }
exec 3<&-
mv /tmp/in.tmp /tmp/in
head -c 16777216 /dev/zero | nc -l -p "$port"
exec sleep 100000`

// TestDockerSocketFlowControl: in proxied docker mode every byte written
// to the host's docker socket reaches the guest's server however slowly
// the server reads, and every byte the server sends reaches a host client
// that reads slowly (gVisor's port forwarding alone drops what the
// guest's TCP send buffer does not take: docs/checkpoint.md).
func TestDockerSocketFlowControl(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	const id = "dkrelay"
	cleanupTask(t, id)
	mustCtr(t, "run", "-d", "--runtime", runtime, "--annotation", api.AnnotationDocker+"=true", busybox, id, "sh", "-c", relayInit)
	sock := harness.State.DockerSocket(testNS, id)
	ctx := context.Background()
	exec := func(n int, script string) (string, int) {
		r, err := e.ctrResult(ctx, "task", "exec", "--exec-id", fmt.Sprintf("fc%d", n), id, "sh", "-c", script)
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		return r.stdout, r.code
	}
	n := 0
	waitListen := func() {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			n++
			if _, code := exec(n, `netstat -ltn | grep -q ":$(cat /tmp/port) "`); code == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the guest's nc never listened")
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	dial := func() *net.UnixConn {
		t.Helper()
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatalf("dial %s: %v", sock, err)
		}
		return c
	}

	// Host to guest.
	waitListen()
	c := dial()
	start := time.Now()
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	buf := make([]byte, 64<<10)
	sent := 0
	for sent < relayBytes {
		w, err := c.Write(buf)
		sent += w
		if err != nil {
			t.Fatalf("write to %s after %d bytes: %v", sock, sent, err)
		}
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, c) // until the guest's server closed
	c.Close()
	var got int
	deadline := time.Now().Add(60 * time.Second)
	for {
		n++
		out, code := exec(n, "cat /tmp/in")
		if code == 0 {
			var err error
			if got, err = strconv.Atoi(strings.TrimSpace(out)); err != nil {
				t.Fatalf("/tmp/in: %q", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the guest's nc never finished reading")
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("host to guest: %d bytes in %s", got, time.Since(start).Round(time.Millisecond))
	if got != relayBytes {
		t.Errorf("host to guest: the guest read %d bytes, the host wrote %d", got, relayBytes)
	}

	// Guest to host, read slowly.
	waitListen()
	c = dial()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	time.Sleep(3 * time.Second)
	start = time.Now()
	small := make([]byte, 4<<10)
	recv := 0
	for recv < relayBytes {
		r, err := c.Read(small)
		recv += r
		if err != nil {
			break
		}
		if recv%(1<<20) < 4<<10 {
			time.Sleep(50 * time.Millisecond) // a slow reader now and then
		}
	}
	t.Logf("guest to host: %d bytes in %s", recv, time.Since(start).Round(time.Millisecond))
	if recv != relayBytes {
		t.Errorf("guest to host: the host read %d bytes, the guest sent %d", recv, relayBytes)
	}
}
