package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"

	sdk "github.com/gvxrun/gvx"
)

// ckClient is an SDK client whose checkpoint store is on an XFS loop
// filesystem (reflink copies of volumes), with spares ready per
// checkpoint.
func ckClient(t *testing.T, spares int) (*sdk.Client, string) {
	t.Helper()
	requireEnv(t)
	dir := loopFS(t, "xfs")
	state, err := os.MkdirTemp("/run", "gvxsdk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	opts := sdk.Options{Containerd: e.Socket(), Namespace: testNS, BinDir: e.gvxBin,
		StateDir: state, CheckpointDir: filepath.Join(dir, "store"), Spares: spares}
	ckOptions = opts
	c, err := sdk.Connect(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		cks, err := c.Checkpoints(ctx)
		if err != nil {
			t.Error(err)
		}
		if err := c.Close(ctx); err != nil {
			t.Error(err)
		}
		for _, ck := range cks {
			// Released by the test already, or now.
			if err := c.ReleaseCheckpoint(ctx, ck.ID); err != nil && !errors.Is(err, sdk.ErrNotFound) && !errors.Is(err, sdk.ErrClosed) {
				t.Error(err)
			}
		}
	})
	return c, dir
}

// ckOptions are the options of the last ckClient (a second program's
// client connects with them).
var ckOptions sdk.Options

// sh runs a shell command in sb and returns its trimmed stdout.
func sh(t *testing.T, sb *sdk.Sandbox, cmd string) string {
	t.Helper()
	res, err := sb.Exec(context.Background(), []string{"sh", "-c", cmd}, sdk.ExecOptions{Timeout: 30 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s in %s: %+v, %v (stderr %q)", cmd, sb.ID(), res, err, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// usr1Counter is an init that counts SIGUSR1s in a shell variable (state
// only in memory) and writes the count to /tmp/n.
const usr1Counter = `n=0; trap 'n=$((n+1)); echo $n > /tmp/n' USR1; echo 0 > /tmp/n; while :; do sleep 0.05; done`

// TestSDKCheckpoint: the SDK's Checkpoint, Rollback, Fork and
// ReleaseCheckpoint on a sandbox with a cloned volume: after a rollback
// the files of the root filesystem and of the volume and the init's
// in-memory counter are as at the checkpoint, the sandbox keeps its id,
// a checkpoint taken then is a child of the one rolled back to, forks
// diverge, a sandbox whose init was killed runs again after a rollback,
// and released or foreign checkpoints are refused.
func TestSDKCheckpoint(t *testing.T) {
	checkNoLeaks(t)
	c, dir := ckClient(t, 1)
	ctx := context.Background()
	golden := filepath.Join(dir, "golden.ext4")
	gvx(t, "volume", "create", "--size", "64M", golden)
	sb, err := c.New(ctx, sdk.Config{ID: "sdkck", Image: busyboxArchive(), Cmd: []string{"sh", "-c", usr1Counter},
		Mounts: []sdk.Mount{{Type: sdk.MountVolume, Source: golden, Target: "/work", Clone: true}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sb.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	signal := func(want string) {
		t.Helper()
		if err := sb.Signal(ctx, syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "counter at "+want, func() bool { return sh(t, sb, "cat /tmp/n") == want })
	}
	waitFor(t, "the init's trap", func() bool { return sh(t, sb, "cat /tmp/n 2>/dev/null || true") == "0" })
	signal("1")
	sh(t, sb, "echo one > /work/f; echo kept > /tmp/kept")
	ck1, err := sb.Checkpoint(ctx, sdk.CheckpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ck1.Sandbox != "sdkck" || ck1.Parent != "" || ck1.Paused <= 0 {
		t.Errorf("first checkpoint: %+v", ck1)
	}
	signal("2")
	signal("3")
	sh(t, sb, "echo two > /work/f; rm /tmp/kept; echo new > /tmp/new")

	if err := sb.Rollback(ctx, ck1.ID); err != nil {
		t.Fatal(err)
	}
	if sb.ID() != "sdkck" {
		t.Errorf("ID after a rollback: %s", sb.ID())
	}
	if got := sh(t, sb, "cat /work/f /tmp/kept; ls /tmp/new 2>&1 || true"); !strings.HasPrefix(got, "one\nkept\n") || !strings.Contains(got, "No such file") {
		t.Errorf("files after the rollback:\n%s", got)
	}
	signal("2") // the in-memory count was 1 at the checkpoint

	// Another program finds the rolled-back sandbox by its id (its
	// backing is a container the rollback restored) and lists it once.
	c2opts := ckOptions
	c2opts.Spares = 0
	c2, err := sdk.Connect(ctx, c2opts)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c2.Attach(ctx, "sdkck")
	if err != nil {
		t.Fatalf("attach after a rollback: %v", err)
	}
	if got := sh(t, again, "cat /work/f; ls /tmp/new 2>&1 || true"); !strings.HasPrefix(got, "one\n") {
		t.Errorf("the attached sandbox's files: %q, want the rolled-back ones", got)
	}
	if infos, err := c2.List(ctx); err != nil || len(infos) != 1 || infos[0].ID != "sdkck" || infos[0].Status != sdk.StatusRunning {
		t.Errorf("List after a rollback: %+v, %v; want sdkck once, running", infos, err)
	}
	if err := c2.Close(ctx); err != nil {
		t.Error(err)
	}

	// Async: the handle comes back paused; the next call waits for the save.
	ck2, err := sb.Checkpoint(ctx, sdk.CheckpointOptions{Async: true})
	if err != nil {
		t.Fatal(err)
	}
	if ck2.Parent != ck1.ID {
		t.Errorf("checkpoint after a rollback to %s: parent %q", ck1.ID, ck2.Parent)
	}
	sh(t, sb, "echo three > /work/f")

	forks, err := c.Fork(ctx, ck2.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forks {
		defer func() {
			if err := f.Close(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	if len(forks) != 2 || forks[0].ID() == forks[1].ID() || forks[0].ID() == sb.ID() {
		t.Fatalf("forks: %v", forks)
	}
	sh(t, forks[0], "echo fork0 > /work/f")
	for i, want := range []string{"fork0", "one", "three"} {
		s := []*sdk.Sandbox{forks[0], forks[1], sb}[i]
		if got := sh(t, s, "cat /work/f"); got != want {
			t.Errorf("%s: /work/f = %q, want %q", s.ID(), got, want)
		}
	}
	if got := sh(t, forks[1], "cat /tmp/n"); got != "2" {
		t.Errorf("fork's counter file: %q, want 2", got)
	}
	// Forks are sandboxes of their own to another program too.
	c3, err := sdk.Connect(ctx, c2opts)
	if err != nil {
		t.Fatal(err)
	}
	if f1, err := c3.Attach(ctx, forks[1].ID()); err != nil {
		t.Errorf("attach a fork: %v", err)
	} else if got := sh(t, f1, "cat /work/f"); got != "one" {
		t.Errorf("the attached fork's /work/f = %q, want one", got)
	}
	if infos, err := c3.List(ctx); err != nil || len(infos) != 3 {
		t.Errorf("List with two forks: %+v, %v; want 3 sandboxes", infos, err)
	}
	if err := c3.Close(ctx); err != nil {
		t.Error(err)
	}

	// A killed init runs again after a rollback.
	if err := sb.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("the init did not exit after SIGKILL")
	}
	if err := sb.Rollback(ctx, ck2.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.Exited():
		t.Fatal("Exited still closed after the rollback")
	default:
	}
	if got := sh(t, sb, "cat /work/f"); got != "one" {
		t.Errorf("after the second rollback /work/f = %q, want one", got)
	}
	signal("3")

	cks, err := c.Checkpoints(ctx)
	if err != nil || len(cks) != 2 {
		t.Errorf("Checkpoints: %+v, %v", cks, err)
	}
	if err := c.ReleaseCheckpoint(ctx, ck1.ID); err != nil {
		t.Fatal(err)
	}
	if err := sb.Rollback(ctx, ck1.ID); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("rollback to a released checkpoint: %v, want ErrNotFound", err)
	}
	if err := forks[0].Rollback(ctx, ck2.ID); err != nil {
		t.Errorf("a fork rolls back to its handle: %v", err)
	}
	other := idle(t, c, "sdkckother")
	if err := other.Rollback(ctx, ck2.ID); !errors.Is(err, sdk.ErrInvalid) {
		t.Errorf("rollback to another sandbox's checkpoint: %v, want ErrInvalid", err)
	}
	if got := sh(t, sb, "cat /tmp/n"); got != "3" {
		t.Errorf("refused rollbacks changed the sandbox: /tmp/n = %q", got)
	}
}

// TestSDKCheckpointRefused: a sandbox publishing a unix socket (a host
// socket gVisor cannot save) is refused with ErrUnsupported and runs on.
func TestSDKCheckpointRefused(t *testing.T) {
	checkNoLeaks(t)
	c, dir := ckClient(t, 0)
	ctx := context.Background()
	sb, err := c.New(ctx, sdk.Config{ID: "sdkckpub", Image: busyboxArchive(), Cmd: []string{"sleep", "100000"},
		Publish: []sdk.Publish{{HostPath: filepath.Join(dir, "pub.sock"), GuestPath: "/tmp/pub.sock"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sb.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	_, err = sb.Checkpoint(ctx, sdk.CheckpointOptions{})
	if !errors.Is(err, sdk.ErrUnsupported) || !strings.Contains(err.Error(), "host unix socket") {
		t.Errorf("checkpoint of a sandbox publishing a socket: %v, want ErrUnsupported naming the socket", err)
	}
	if got := sh(t, sb, "echo alive"); got != "alive" {
		t.Errorf("after the refusal: %q", got)
	}
	if cks, _ := c.Checkpoints(ctx); len(cks) != 0 {
		t.Errorf("a refused checkpoint left handles: %+v", cks)
	}
}

// TestSDKCheckpointNAT: a NAT sandbox (SDK Network NetworkNAT) is
// checkpointed, rolled back and forked with its network: after a rollback
// the file written after the checkpoint is gone, eth0 is 10.0.2.15 again
// and the guest reaches the host's server through 10.0.2.2 (a new NAT
// process, the same policy: a port it does not allow is still refused);
// each fork has a NAT of its own. A checkpoint while the guest holds a TCP
// connection through the NAT is refused naming the peer, and one of a NAT
// publishing host ports naming the ports; the sandbox runs on after each.
func TestSDKCheckpointNAT(t *testing.T) {
	checkNoLeaks(t)
	c, _ := ckClient(t, 0)
	ctx := context.Background()
	srv := startNATHTTP(t, "through the nat")
	hold, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	held := make(chan net.Conn, 1)
	go func() {
		if conn, err := hold.Accept(); err == nil {
			held <- conn
		}
	}()
	holdPort := hold.Addr().(*net.TCPAddr).Port
	other := startNATHTTP(t, "not allowed")
	sb, err := c.New(ctx, sdk.Config{ID: "sdkcknat", Image: busyboxArchive(), Cmd: []string{"sh", "-c", usr1Counter},
		Network: sdk.NetworkNAT, NAT: &sdk.NAT{DNS: []string{"127.0.0.1:9"},
			EgressAllow: []string{fmt.Sprintf("10.0.2.2:%d", srv.port), fmt.Sprintf("10.0.2.2:%d", holdPort)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sb.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	get := fmt.Sprintf("wget -q -O - http://10.0.2.2:%d/", srv.port)
	check := func(sb *sdk.Sandbox, when string) {
		t.Helper()
		if got := sh(t, sb, "ip -4 -o addr show eth0"); !strings.Contains(got, "10.0.2.15/24") {
			t.Errorf("%s: eth0 of %s: %q", when, sb.ID(), got)
		}
		if got := sh(t, sb, get); got != "through the nat" {
			t.Errorf("%s: %s through 10.0.2.2: %q", when, sb.ID(), got)
		}
		res, err := sb.Exec(ctx, []string{"wget", "-q", "-O", "-", fmt.Sprintf("http://10.0.2.2:%d/", other.port)}, sdk.ExecOptions{Timeout: 30 * time.Second})
		if err != nil || res.ExitCode == 0 {
			t.Errorf("%s: %s reached a port its policy does not allow: %+v, %v", when, sb.ID(), res, err)
		}
	}
	check(sb, "before the checkpoint")
	before := srv.conns.Load()
	tcpChecks := watchTCPChecks(t)

	// A connection out through the NAT: its host socket is the NAT's, so a
	// restore could not bring it back.
	nctx, stopNC := context.WithCancel(ctx)
	ncDone := make(chan struct{})
	go func() {
		defer close(ncDone)
		_, _ = sb.Exec(nctx, []string{"sh", "-c", fmt.Sprintf("sleep 600 | nc 10.0.2.2 %d", holdPort)}, sdk.ExecOptions{})
	}()
	var conn net.Conn
	select {
	case conn = <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the guest's nc never connected through the NAT")
	}
	_, err = sb.Checkpoint(ctx, sdk.CheckpointOptions{})
	if !errors.Is(err, sdk.ErrUnsupported) || !strings.Contains(err.Error(), fmt.Sprintf("10.0.2.2:%d", holdPort)) {
		t.Errorf("checkpoint of a NAT sandbox holding a connection out: %v, want ErrUnsupported naming 10.0.2.2:%d", err, holdPort)
	}
	stopNC()
	conn.Close()
	<-ncDone
	if cks, _ := c.Checkpoints(ctx); len(cks) != 0 {
		t.Errorf("a refused checkpoint left handles: %+v", cks)
	}
	// With a flow open the engine asked the guest for its TCP table.
	if n := tcpChecks(sb); n == 0 {
		t.Errorf("the refused checkpoint ran no TCP-table exec")
	}

	sh(t, sb, "echo 1 > /tmp/state; kill -USR1 1")
	waitSh(t, sb, "cat /tmp/n", "1")
	tcpChecks(sb) // the refused one's, counted above
	ck, err := sb.Checkpoint(ctx, sdk.CheckpointOptions{})
	if err != nil {
		t.Fatalf("checkpoint of a NAT sandbox: %v", err)
	}
	// No flow open: the NAT's count said so, and no exec was needed.
	if n := tcpChecks(sb); n != 0 {
		t.Errorf("a checkpoint with no flow open through the NAT ran %d TCP-table execs, want none", n)
	}
	sh(t, sb, "echo 2 > /tmp/state; kill -USR1 1")
	waitSh(t, sb, "cat /tmp/n", "2")
	if err := sb.Rollback(ctx, ck.ID); err != nil {
		t.Fatalf("rollback of a NAT sandbox: %v", err)
	}
	if got := sh(t, sb, "cat /tmp/state"); got != "1" {
		t.Errorf("after the rollback /tmp/state is %q, want 1", got)
	}
	sh(t, sb, "kill -USR1 1")
	waitSh(t, sb, "cat /tmp/n", "2") // 1 at the checkpoint, one more since
	check(sb, "after the rollback")
	if srv.conns.Load() <= before {
		t.Errorf("the server saw no connection after the rollback")
	}

	forks, err := c.Fork(ctx, ck.ID, 2)
	if err != nil {
		t.Fatalf("fork of a NAT sandbox: %v", err)
	}
	for i, f := range forks {
		check(f, "a fork")
		sh(t, f, fmt.Sprintf("echo fork%d > /tmp/state", i))
	}
	for i, f := range forks {
		if got := sh(t, f, "cat /tmp/state"); got != fmt.Sprintf("fork%d", i) {
			t.Errorf("fork %d sees %q", i, got)
		}
		if err := f.Close(ctx); err != nil {
			t.Error(err)
		}
	}
	if got := sh(t, sb, "cat /tmp/state"); got != "1" {
		t.Errorf("the forks' writes reached the sandbox: %q", got)
	}
	if err := c.ReleaseCheckpoint(ctx, ck.ID); err != nil {
		t.Error(err)
	}

	// A NAT that publishes host ports: a rollback or fork would bind them
	// twice.
	sock := filepath.Join(t.TempDir(), "p.sock")
	pub, err := c.New(ctx, sdk.Config{ID: "sdkcknatpub", Image: busyboxArchive(), Cmd: []string{"sleep", "100000"},
		Network: sdk.NetworkNAT, NAT: &sdk.NAT{DNS: []string{"127.0.0.1:9"}, Ports: []string{"unix:" + sock + ":80"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := pub.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	_, err = pub.Checkpoint(ctx, sdk.CheckpointOptions{})
	if !errors.Is(err, sdk.ErrUnsupported) || !strings.Contains(err.Error(), "publishes host ports") || !strings.Contains(err.Error(), sock) {
		t.Errorf("checkpoint of a NAT publishing a port: %v, want ErrUnsupported naming %s", err, sock)
	}
	if got := sh(t, pub, "echo alive"); got != "alive" {
		t.Errorf("after the refusal: %q", got)
	}
}

// watchTCPChecks counts the rollout engine's TCP-table execs
// (checkpoint.TCPTablesCmd, exec ids gvx-ck-tcp-…) from containerd's
// exec-added events. The function it returns gives the count since its
// last call, once an exec of its own in sb has been seen after them
// (events come in order).
func watchTCPChecks(t *testing.T) func(sb *sdk.Sandbox) int {
	t.Helper()
	cc, err := client.New(e.Socket())
	if err != nil {
		t.Fatal(err)
	}
	evctx, cancel := context.WithCancel(namespaces.WithNamespace(context.Background(), testNS))
	t.Cleanup(func() { cancel(); cc.Close() })
	ch, errs := cc.Subscribe(evctx, `topic=="/tasks/exec-added"`)
	var mu sync.Mutex
	var ids []string
	go func() {
		for {
			select {
			case env := <-ch:
				if v, err := typeurl.UnmarshalAny(env.Event); err == nil {
					if ev, ok := v.(*apievents.TaskExecAdded); ok {
						mu.Lock()
						ids = append(ids, ev.ExecID)
						mu.Unlock()
					}
				}
			case <-errs:
				return
			case <-evctx.Done():
				return
			}
		}
	}()
	seen := 0
	return func(sb *sdk.Sandbox) int {
		t.Helper()
		// An exec of our own, after the engine's: once its event is in,
		// so are theirs. (The sandbox's container is its ID until a
		// rollback.)
		mark := fmt.Sprintf("mark%d", execSeq.Add(1))
		if r := ctrExec(t, sb.ID(), mark, "true"); r.code != 0 {
			t.Fatalf("exec %s in %s: %d %s", mark, sb.ID(), r.code, r.stderr)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			in := slices.Contains(ids[seen:], mark)
			mu.Unlock()
			if in {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no exec-added event for exec %s", mark)
			}
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		count := 0
		for _, id := range ids[seen:] {
			if strings.HasPrefix(id, "gvx-ck-tcp-") {
				count++
			}
		}
		seen = len(ids)
		return count
	}
}

// waitSh waits until cmd's output in sb is want.
func waitSh(t *testing.T, sb *sdk.Sandbox, cmd, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := sh(t, sb, cmd)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("in %s, %q gave %q, want %q", sb.ID(), cmd, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSDKExecAcrossRollback: a command running when its sandbox rolls
// back belongs to the state left behind: its Wait returns at the
// rollback, killed (137), with a spare and with a restore alike, and the
// restored sandbox has no copy of it running (the checkpoint was taken
// while it ran).
func TestSDKExecAcrossRollback(t *testing.T) {
	checkNoLeaks(t)
	for _, spares := range []int{0, 1} {
		t.Run(fmt.Sprintf("spares=%d", spares), func(t *testing.T) {
			sb := sleepingSandbox(t, spares, fmt.Sprintf("xrb%d", spares))
			ctx := context.Background()
			p, err := sb.Start(ctx, []string{"sh", "-c", "while true; do echo tick; sleep 0.05; done"}, sdk.ExecOptions{})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the command", func() bool { return strings.Contains(sh(t, sb, "ps -o args"), "while true") })
			rollBackToNow(t, sb, spares)
			wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			res, err := p.Wait(wctx)
			if err != nil || res.ExitCode != 137 {
				t.Errorf("the command across the rollback: %+v, %v; want it killed (137) at the rollback", res, err)
			}
			if ps := sh(t, sb, "ps -o args"); strings.Contains(ps, "while true") {
				t.Errorf("the restored sandbox runs a copy of the command:\n%s", ps)
			}
		})
	}
}

// bgLoop is a script that counts in a shell variable (state only in
// memory), writing each count to /tmp/bg.
const bgLoop = `i=0; while :; do i=$((i+1)); echo $i > /tmp/bg; sleep 0.05; done`

// TestSDKBackgroundAcrossRollback: what a command left running in the
// background (a process it started, adopted by init once the command
// exited) is part of the sandbox's state: a rollback and a fork restore
// it running, counting on from the checkpoint's count in its memory,
// while the command still running at the checkpoint is not restored.
func TestSDKBackgroundAcrossRollback(t *testing.T) {
	checkNoLeaks(t)
	for _, spares := range []int{0, 1} {
		t.Run(fmt.Sprintf("spares=%d", spares), func(t *testing.T) {
			c, _ := ckClient(t, spares)
			ctx := context.Background()
			sb, err := c.New(ctx, sdk.Config{ID: fmt.Sprintf("bgrb%d", spares), Image: busyboxArchive(), Cmd: []string{"sleep", "3600"}})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := sb.Close(ctx); err != nil {
					t.Error(err)
				}
			}()
			count := func(sb *sdk.Sandbox) int { // -1 until the loop writes
				// The loop truncates /tmp/bg before it writes it: a read
				// in between finds it empty; the next write is 50 ms on.
				for i := 0; i < 10; i++ {
					if n, err := strconv.Atoi(sh(t, sb, "cat /tmp/bg 2>/dev/null; true")); err == nil {
						return n
					}
					time.Sleep(20 * time.Millisecond)
				}
				return -1
			}
			loops := func(sb *sdk.Sandbox) int { // the loop, adopted by init; not its children between fork and exec
				n := 0
				for _, line := range strings.Split(sh(t, sb, "ps -o ppid,args"), "\n") {
					if f := strings.Fields(line); len(f) == 3 && f[0] == "1" && f[1] == "sh" && f[2] == "/tmp/bgloop.sh" {
						n++
					}
				}
				return n
			}
			sh(t, sb, "echo '"+bgLoop+"' > /tmp/bgloop.sh; sh /tmp/bgloop.sh </dev/null >/dev/null 2>&1 &")
			waitFor(t, "the background loop to count", func() bool { return count(sb) >= 5 })
			running, err := sb.Start(ctx, []string{"sh", "-c", "while true; do sleep 0.05; done"}, sdk.ExecOptions{})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the running command", func() bool { return strings.Contains(sh(t, sb, "ps -o args"), "while true") })
			ck, err := sb.Checkpoint(ctx, sdk.CheckpointOptions{})
			if err != nil {
				t.Fatal(err)
			}
			atCheckpoint := count(sb)
			waitFor(t, "the loop to count on", func() bool { return count(sb) >= atCheckpoint+40 })
			if spares > 0 {
				time.Sleep(time.Second) // the spare's restore
			}
			before := count(sb)
			if err := sb.Rollback(ctx, ck.ID); err != nil {
				t.Fatal(err)
			}
			if n := loops(sb); n != 1 {
				t.Fatalf("after the rollback %d background loops run, want the one started before the checkpoint", n)
			}
			after := count(sb)
			if after >= before {
				t.Errorf("the loop's count after the rollback %d, before it %d (at the checkpoint %d): want it counting on from the checkpoint's", after, before, atCheckpoint)
			}
			waitFor(t, "the restored loop to count", func() bool { return count(sb) > after })
			if res, err := running.Wait(ctx); err != nil || res.ExitCode != 137 {
				t.Errorf("the command running at the checkpoint: %+v, %v; want it killed (137) at the rollback", res, err)
			}
			if ps := sh(t, sb, "ps -o args"); strings.Contains(ps, "while true") {
				t.Errorf("the restored sandbox runs a copy of the command running at the checkpoint:\n%s", ps)
			}
			if spares > 0 {
				return
			}
			forks, err := c.Fork(ctx, ck.ID, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := forks[0].Close(ctx); err != nil {
					t.Error(err)
				}
			}()
			if n := loops(forks[0]); n != 1 {
				t.Errorf("a fork runs %d background loops, want 1", n)
			}
			first := count(forks[0])
			waitFor(t, "the fork's loop to count", func() bool { return count(forks[0]) > first })
		})
	}
}

// TestSDKExecUserAfterRollback: after a rollback, execs as users the
// sandbox had not resolved yet work once the container the sandbox was
// created with is gone (the image's passwd and group files were read
// from its snapshot), and a command cut by its timeout takes what it
// started in the background with it (the SDK's sweep runs as "0:0").
func TestSDKExecUserAfterRollback(t *testing.T) {
	checkNoLeaks(t)
	for _, spares := range []int{0, 1} {
		t.Run(fmt.Sprintf("spares=%d", spares), func(t *testing.T) {
			sb := sleepingSandbox(t, spares, fmt.Sprintf("xusr%d", spares))
			ctx := context.Background()
			rollBackToNow(t, sb, spares)
			nsctx := namespaces.WithNamespace(ctx, testNS)
			cl := mustClient(t)
			waitFor(t, "the container the sandbox was created with to go", func() bool {
				_, err := cl.LoadContainer(nsctx, sb.ID())
				return errdefs.IsNotFound(err)
			})
			for user, want := range map[string]string{"nobody": "uid=65534(nobody)", "65534": "uid=65534(nobody)", "0:0": "uid=0(root)", "root": "uid=0(root)"} {
				res, err := sb.Exec(ctx, []string{"id"}, sdk.ExecOptions{User: user, Timeout: 30 * time.Second})
				if err != nil || !strings.HasPrefix(string(res.Stdout), want) {
					t.Errorf("id as %q after the rollback: %q, %v; want %s", user, res.Stdout, err, want)
				}
			}
			_, err := sb.Exec(ctx, []string{"sh", "-c", "sleep 707 & sleep 708"}, sdk.ExecOptions{Timeout: 500 * time.Millisecond})
			if !errors.Is(err, sdk.ErrTimeout) {
				t.Fatalf("a command past its timeout: %v, want ErrTimeout", err)
			}
			if ps := sh(t, sb, "ps -o args"); strings.Contains(ps, "sleep 707") {
				t.Errorf("what the timed-out command started in the background runs on:\n%s", ps)
			}
		})
	}
}

// TestSDKExecDuringRollback: execs started while the sandbox is rolled
// back again and again each run (in the backing before a rollback, which
// kills them: 137, or in the one after), and none fails on a backing
// being replaced.
func TestSDKExecDuringRollback(t *testing.T) {
	checkNoLeaks(t)
	sb := sleepingSandbox(t, 0, "xexrb")
	ctx := context.Background()
	ck, err := sb.Checkpoint(ctx, sdk.CheckpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran, killed := 0, 0
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := sb.Exec(ctx, []string{"sh", "-c", "sleep 0.05; echo ok"}, sdk.ExecOptions{Timeout: 30 * time.Second})
				mu.Lock()
				switch {
				case err == nil && res.ExitCode == 0 && string(res.Stdout) == "ok\n":
					ran++
				case err == nil && res.ExitCode == 137:
					killed++
				default:
					t.Errorf("an exec during rollbacks: %+v, %v", res, err)
				}
				mu.Unlock()
			}
		}()
	}
	// Back to back, a rollback kills every exec started since the last
	// one unless the exec ends within the restore, which on a loaded
	// 2-core machine it may not: after the 4th rollback the loop waits
	// for an exec to complete in the restored backing before going on.
	ranBy := func() int { mu.Lock(); defer mu.Unlock(); return ran }
	for i := 0; i < 8; i++ {
		if err := sb.Rollback(ctx, ck.ID); err != nil {
			t.Error(err)
		}
		if i == 3 {
			deadline := time.Now().Add(10 * time.Second)
			for ranBy() == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d execs ran, %d were killed by a rollback", ran, killed)
	if ran == 0 {
		t.Error("no exec ran between the rollbacks")
	}
}

// sleepingSandbox is a busybox sandbox id sleeping on a ckClient with
// spares, closed when the test ends.
func sleepingSandbox(t *testing.T, spares int, id string) *sdk.Sandbox {
	t.Helper()
	c, _ := ckClient(t, spares)
	ctx := context.Background()
	sb, err := c.New(ctx, sdk.Config{ID: id, Image: busyboxArchive(), Cmd: []string{"sleep", "3600"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sb.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return sb
}

// rollBackToNow checkpoints sb and rolls it back to that checkpoint (with
// spares, once the spare's restore is done).
func rollBackToNow(t *testing.T, sb *sdk.Sandbox, spares int) {
	t.Helper()
	ctx := context.Background()
	ck, err := sb.Checkpoint(ctx, sdk.CheckpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if spares > 0 {
		time.Sleep(time.Second) // the spare's restore (≈ 0.1–0.3 s)
	}
	if err := sb.Rollback(ctx, ck.ID); err != nil {
		t.Fatal(err)
	}
}
