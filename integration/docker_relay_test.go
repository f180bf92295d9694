package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/checkpoint"
	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/internal/digest"
	"github.com/gvxrun/gvx/oci"
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

// TestDockerRelayReplaced: the host's gvx-relay replaced (as an upgrade
// of gvx replaces it) between a docker-mode sandbox's checkpoint and its
// restore, and the node's copy of the old one gone (as after a reboot):
// the restored sandbox runs the relay it was saved with, taken back from
// the checkpoint, and its relay process, running since before the
// checkpoint, still relays new connections to the guest's server. A
// sandbox started afterwards runs the new build.
func TestDockerRelayReplaced(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	bin := t.TempDir()
	for _, name := range []string{api.SentryBinary, api.HookBinary} {
		if err := os.Symlink(filepath.Join(e.Bins.GVX, name), filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	// Builds of the test's own (not the Makefile's: the node's relay
	// copies of those stay alone).
	relay := filepath.Join(bin, api.RelayBinary)
	build := func(ldflags string) string {
		t.Helper()
		next := relay + ".new"
		cmd := osexec.Command("go", "build", "-trimpath", "-ldflags="+ldflags, "-o", next, "../cmd/gvx-relay")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build gvx-relay: %v\n%s", err, out)
		}
		if err := os.Rename(next, relay); err != nil {
			t.Fatal(err)
		}
		sum, err := digest.File(relay)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(harness.State.Relay(sum)) })
		return sum
	}
	// In place of dockerd: testdata/lineserver on GVX_DOCKER_TCP, which
	// answers each connection's first line with "pong LINE" (and the
	// shim's GET /_ping of a restore as dockerd would).
	srv := buildTestdata(t, "lineserver")
	old := build("-X main.gvxTestBuild=old")
	cfg := filepath.Join(bin, "config.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("sentry = %q\n", filepath.Join(bin, api.SentryBinary))), 0o644); err != nil {
		t.Fatal(err)
	}
	const id, ref = "dkrelayup", "gvx.test/dkrelayup:1"
	cleanupTask(t, id)
	t.Cleanup(func() { _, _ = e.ctrResult(context.Background(), "images", "rm", ref) })
	start := func() {
		t.Helper()
		mustCtr(t, "run", "-d", "--runtime", runtime, "--runtime-config-path", cfg, "--annotation", api.AnnotationDocker+"=true",
			"--mount", "type=bind,src="+filepath.Dir(srv)+",dst=/t,options=rbind:ro",
			busybox, id, "sh", "-c", `exec /t/lineserver "$GVX_DOCKER_TCP" /`)
	}
	sock := harness.State.DockerSocket(testNS, id)
	ping := func(what string, n int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for i := 0; i < n; {
			got, err := relayPing(sock, fmt.Sprintf("%s-%d", what, i))
			if err == nil && got == fmt.Sprintf("pong %s-%d", what, i) {
				i++
				continue
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: connection %d through %s: %q, %v", what, i, sock, got, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// runs says whether the node's copy of the relay build sum is
	// there (read-only) and mounted for task id's sandbox.
	runs := func(sum string) bool {
		t.Helper()
		st, err := os.Stat(harness.State.Relay(sum))
		if err != nil {
			t.Log(err)
			return false
		}
		if st.Mode().Perm() != 0o555 {
			t.Errorf("relay copy %s: mode %v, want 0555", harness.State.Relay(sum), st.Mode().Perm())
		}
		// The sandbox's gofer holds the copy's mount (no other sandbox
		// runs this build).
		mountinfos, _ := filepath.Glob("/proc/[0-9]*/mountinfo")
		for _, mi := range mountinfos {
			b, _ := os.ReadFile(mi)
			for _, l := range strings.Split(string(b), "\n") {
				if f := strings.Fields(l); len(f) > 4 && strings.HasSuffix(f[3], "/relay/"+sum) && strings.HasSuffix(f[4], oci.DockerRelayGuest) {
					return true
				}
			}
		}
		return false
	}
	start()
	if !runs(old) {
		t.Fatalf("the sandbox does not run the node's copy %s of its gvx-relay", harness.State.Relay(old))
	}
	ping("before", 3)
	mustCtr(t, "container", "checkpoint", "--task", id, ref)
	removeTask(t, id)

	// An upgrade: another gvx-relay build renamed over the old one; and
	// the node's copy of the old one gone.
	next := build("-s -w -X main.gvxTestBuild=next")
	if err := os.Remove(harness.State.Relay(old)); err != nil {
		t.Fatal(err)
	}
	mustCtr(t, "container", "restore", "--live", id, ref)
	if !runs(old) {
		t.Errorf("the restored sandbox does not run the gvx-relay it was saved with (%s)", old)
	}
	ping("after", 20)
	removeTask(t, id)

	start()
	if !runs(next) {
		t.Errorf("a sandbox started after the upgrade does not run the new gvx-relay (%s)", next)
	}
	ping("new", 3)
	removeTask(t, id)
}

// relayPing sends line on a new connection to docker socket sock and
// returns the answer's first line.
func relayPing(sock, line string) (string, error) {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return strings.TrimSpace(string(b)), err
}

// TestDockerRestoreTimeWait: every connection to a restored docker-mode
// sandbox's socket answers at once, though its checkpoint was taken just
// after 1000 connections that gvx-relay refused (its backend not
// listening yet) and 1000 that the backend closed first. gVisor draws a
// new TCP initial-sequence-number secret at a restore, so a SYN whose
// address pair matches a TIME-WAIT endpoint saved in the checkpoint is
// dropped half of the time until that endpoint expires (60 s); for the
// Sentry's port forwarding, which connects holding the sandbox's loader
// lock, that stalls the socket and every control call for 63 s
// (TestDockerRelayReplaced failed so in CI). gvx-relay leaves no such
// pair: it is never the first to close a stream, and it dials its backend
// from source ports of its own, restored, sequence. The same on gvx's NAT
// (subtest nat), where the streams come through the NAT's published
// socket of the relay's port: the NAT closes first, and its TIME-WAIT
// endpoints go with its process.
func TestDockerRestoreTimeWait(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	srv := buildTestdata(t, "lineserver")
	for _, network := range []string{api.NetworkSandbox, api.NetworkNAT, api.NetworkNone} {
		t.Run(network, func(t *testing.T) { restoreTimeWait(t, srv, network) })
	}
}

func restoreTimeWait(t *testing.T, srv, network string) {
	id, ref := "dkrestoretw-"+network, "gvx.test/dkrestoretw-"+network+":1"
	cleanupTask(t, id)
	t.Cleanup(func() { _, _ = e.ctrResult(context.Background(), "images", "rm", ref) })
	mustCtr(t, "run", "-d", "--runtime", runtime, "--annotation", api.AnnotationDocker+"=true",
		"--annotation", api.AnnotationNetwork+"="+network,
		"--mount", "type=bind,src="+filepath.Dir(srv)+",dst=/t,options=rbind:ro",
		busybox, id, "sh", "-c", `exec /t/lineserver "$GVX_DOCKER_TCP" /tmp/listen`)
	sock := harness.State.DockerSocket(testNS, id)
	if network == api.NetworkNone {
		// On gVisor's netstack in the task's new network namespace
		// (so that dockerd's socket goes through the shim), the guest
		// still has a loopback alone and no route out.
		dev := ctrExec(t, id, "links", "cat", "/proc/net/dev").stdout
		routes := ctrExec(t, id, "routes", "cat", "/proc/net/route").stdout
		route := false
		for _, l := range strings.Split(routes, "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[1] == "00000000" {
				route = true // a default route
			}
		}
		if !checkpoint.OnlyLoopback([]byte(dev)) || !strings.Contains(dev, "lo:") || route {
			t.Errorf("the guest of docker mode on network none: /proc/net/dev\n%s/proc/net/route\n%s; want lo alone and no route", dev, routes)
		}
	}
	// burst makes n connections, 8 at a time; each answers what ask says
	// (with its index) within a deadline, or the first failure is returned.
	burst := func(n int, ask func(i int) (string, string)) error {
		errs := make(chan error, n)
		next := make(chan int)
		for w := 0; w < 8; w++ {
			go func() {
				for i := range next {
					line, want := ask(i)
					t0 := time.Now()
					got, err := relayPing(sock, line)
					if want == "" && got == "" && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
						err = nil // the shim closed before it read the line
					}
					if err != nil || got != want {
						errs <- fmt.Errorf("connection %d: %q after %v (%v), want %q", i, got, time.Since(t0).Round(time.Millisecond), err, want)
						continue
					}
					errs <- nil
				}
			}()
		}
		go func() {
			for i := 0; i < n; i++ {
				next <- i
			}
			close(next)
		}()
		var first error
		for i := 0; i < n; i++ {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	t0 := time.Now()
	// Refused by the relay: the shim closes the client's connection (a
	// reset, with the line unread).
	if err := burst(1000, func(int) (string, string) { return "early", "" }); err != nil {
		t.Fatalf("before the backend listens: %v", err)
	}
	ctrExec(t, id, "listen", "touch", "/tmp/listen")
	ping := func(what string) func(i int) (string, string) {
		return func(i int) (string, string) {
			l := fmt.Sprintf("%s-%d", what, i)
			return l, "pong " + l
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got, err := relayPing(sock, "up"); err == nil && got == "pong up" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the backend does not answer through the docker socket")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := burst(1000, ping("before")); err != nil {
		t.Fatalf("before the checkpoint: %v", err)
	}
	mustCtr(t, "container", "checkpoint", "--task", id, ref)
	t.Logf("2000 connections and the checkpoint in %v", time.Since(t0).Round(time.Millisecond))
	removeTask(t, id)
	mustCtr(t, "container", "restore", "--live", id, ref)
	if err := burst(1000, ping("after")); err != nil {
		t.Fatalf("after the restore: %v", err)
	}
	removeTask(t, id)
}
