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

// fastBytes is its last transfer's, read as fast as the guest's nc goes.
const fastBytes = 256 << 20

// relayInit is the init of TestDockerSocketFlowControl's docker-mode
// sandbox: no dockerd, but busybox nc on the address the image's init is
// told to serve dockerd on (GVX_DOCKER_TCP). First it takes one
// connection and reads it slowly (the pipe's reader sleeps before
// reading: the guest's receive window closes while the host still
// writes), counting the bytes into /tmp/in; its stdin never ends (nc
// would half-close its connection at the end of its stdin, and gVisor's
// port forwarding closes both directions on either's end). Then it sends
// relayBytes on the next connection, and last counts what a fast reader
// takes (the throughput figure of docs/benchmarks.md) into /tmp/fast.
const relayInit = `port=${GVX_DOCKER_TCP##*:}
echo "$port" >/tmp/port
mkfifo /tmp/never
exec 3<>/tmp/never
nc -l -p "$port" <&3 | { sleep 3; wc -c >/tmp/in.tmp; }
exec 3<&-
mv /tmp/in.tmp /tmp/in
head -c 16777216 /dev/zero | nc -l -p "$port"
exec 3<>/tmp/never
nc -l -p "$port" <&3 | wc -c >/tmp/fast.tmp
mv /tmp/fast.tmp /tmp/fast
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

	// The counts are read in the guest once its nc ended.
	count := func(file string) int {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			n++
			out, code := exec(n, "cat "+file)
			if code == 0 {
				got, err := strconv.Atoi(strings.TrimSpace(out))
				if err != nil {
					t.Fatalf("%s: %q", file, out)
				}
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("the guest's nc never finished reading (%s)", file)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	send := func(c *net.UnixConn, size int) {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
		buf := make([]byte, 64<<10)
		for sent := 0; sent < size; {
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
	}

	// Host to guest, read slowly.
	waitListen()
	start := time.Now()
	send(dial(), relayBytes)
	got := count("/tmp/in")
	t.Logf("host to guest: %d bytes in %s", got, time.Since(start).Round(time.Millisecond))
	if got != relayBytes {
		t.Errorf("host to guest: the guest read %d bytes, the host wrote %d", got, relayBytes)
	}

	// Guest to host, read slowly.
	waitListen()
	c := dial()
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
	c.Close()

	// Host to guest as fast as both ends go.
	waitListen()
	start = time.Now()
	send(dial(), fastBytes)
	elapsed := time.Since(start)
	got = count("/tmp/fast")
	t.Logf("host to guest, fast reader: %d bytes in %s (%.0f MiB/s)", got, elapsed.Round(time.Millisecond), float64(got)/(1<<20)/elapsed.Seconds())
	if got != fastBytes {
		t.Errorf("host to guest, fast reader: the guest read %d bytes, the host wrote %d", got, fastBytes)
	}
}
