package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v3"
	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	coci "github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/ttrpc"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/pool/client"
	"github.com/gvxrun/gvx/shim"
)

// TestKillSandbox: kill -9 of the Sentry mid-run is reported as the task's
// exit, and deleting the task leaves nothing behind.
func TestKillSandbox(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	pid := startDetached(t, "crash1", "sleep", "600")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill sandbox %d: %v", pid, err)
	}
	waitStatus(t, "crash1", "STOPPED")
	mustCtr(t, "task", "rm", "crash1")
	mustCtr(t, "container", "rm", "crash1")
}

// TestKillShim: kill -9 of the shim mid-run; containerd notices, runs the
// shim's cleanup (Manager.Stop), which must take the sandbox down with it.
func TestKillShim(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	startDetached(t, "crash2", "sleep", "600")
	shim := shimPid(t, "crash2")
	sandbox := harness.Descendants(shim)
	if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
		t.Fatalf("kill shim %d: %v", shim, err)
	}
	// containerd reaps the task once it sees the shim's socket close.
	deadline := time.Now().Add(20 * time.Second)
	for {
		// Only crash2's own line counts (another test's task may be
		// STOPPED meanwhile).
		st := taskStatus(t, "crash2")
		if st == "" || st == "STOPPED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task crash2 still %s after its shim died", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, _ = e.ctrResult(context.Background(), "task", "rm", "-f", "crash2")
	mustCtr(t, "container", "rm", "crash2")
	for _, pid := range sandbox {
		if p, err := readProc(pid); err == nil && p.state != "Z" {
			t.Errorf("sandbox process %d (%s, state %s) survived its shim", pid, p.name, p.state)
		}
	}
}

// TestCrashMidCreate: a shim killed at any point of a create — after each
// of its preparation steps, and once the sandbox exists — leaves nothing
// on the host once containerd has cleaned up after it (manager.Stop, which
// releases what the task's record names with the code Delete uses). Each
// crash is checked to have happened where it was asked for (the shim logs
// it as it kills itself), and the task's volume is free again afterwards.
func TestCrashMidCreate(t *testing.T) {
	requireEnv(t)
	img := filepath.Join(volumeDir(t), "crash.ext4")
	gvx(t, "volume", "create", "--size", "32M", img)
	checkNoLeaks(t)
	steps := []string{"spec", "volumes", "docker", "pool", "hook", "sentry", "rootfs", "write", "root", shim.FaultCreated}
	for i, step := range steps {
		crashCreate(t, fmt.Sprintf("crash-%d", i), step, volMount(img, "/work"))
	}
	// No lease, mount or loop device holds the volume any more.
	r, err := e.ctrResult(context.Background(), append(append([]string{"run", "--rm", "--runtime", runtime}, volMount(img, "/work")...),
		busybox, "crash-after", "sh", "-c", "echo ok > /work/f && cat /work/f")...)
	if err != nil || r.code != 0 || strings.TrimSpace(r.stdout) != "ok" {
		t.Errorf("the volume after the crashes: exit %d, %q %q (%v)", r.code, r.stdout, r.stderr, err)
	}
}

// TestPoolCrashMidCreate: the same for tasks that adopt a pool sandbox —
// as a container in a warm pool's sandbox, and as a process in an image
// pool's — crashing right after the claim, and once the task exists in
// the sandbox: the claimed sandbox goes with the task.
func TestPoolCrashMidCreate(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	for _, tc := range []struct {
		name  string
		start func(*testing.T, int) *harness.Pool
	}{{"warm", startPool}, {"image", startImagePool}} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.start(t, 2)
			for i, step := range []string{"pool", shim.FaultCreated} {
				id := fmt.Sprintf("pcrash-%s-%d", tc.name, i)
				before := poolClaims(t, p)
				crashCreate(t, id, step, []string{"--runtime-config-path", p.Config})
				if n := poolClaims(t, p); n != before+1 {
					t.Errorf("%s: the pool handed out %d sandboxes, want 1 (the crash came before the claim?)", id, n-before)
				}
				// The claimed sandbox went with the task's cleanup.
				claimed, _ := filepath.Glob(filepath.Join(string(p.Dir), "*", filepath.Base(api.SandboxDir("x").Claimed())))
				if len(claimed) > 0 {
					t.Errorf("%s: claimed pool sandboxes left: %v", id, claimed)
				}
				if err := p.WaitReady(context.Background(), 2, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// poolClaims is how many sandboxes pool p has handed out.
func poolClaims(t *testing.T, p *harness.Pool) int {
	t.Helper()
	cfg, err := config.Load(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	st, err := client.Query(context.Background(), cfg.PoolSocket())
	if err != nil {
		t.Fatal(err)
	}
	return st.Claimed
}

// waitLogged waits up to within for the test containerd's log (its
// shims' lines included) to hold line, and reports whether it did.
func waitLogged(line string, within time.Duration) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		data, _ := os.ReadFile(filepath.Join(e.Containerd.Dir, "containerd.log"))
		if strings.Contains(string(data), line) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// crashCreate runs task id (busybox, with ctr's extra opts) asking its shim
// to crash after step; it checks that the create failed because the shim
// crashed there and waits for containerd's cleanup after the dead shim.
func crashCreate(t *testing.T, id, step string, opts []string) {
	t.Helper()
	cleanupTask(t, id)
	args := append(append([]string{"run", "--runtime", runtime, "--annotation", shim.FaultAnnotation + "=" + step}, opts...), busybox, id, "true")
	r, err := e.ctrResult(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	if r.code == 0 {
		t.Errorf("crash after %s: the task ran (%q); the fault was not injected", step, r.stdout)
		return
	}
	logLine := shim.FaultLog + " " + step + " of task " + id
	if !waitLogged(logLine, 10*time.Second) {
		t.Fatalf("crash after %s: create failed (%s) but the shim never logged %q", step, strings.TrimSpace(r.stderr), logLine)
	}
	// containerd runs the shim's cleanup once it notices the shim died.
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _, _ := e.ctr(context.Background(), "task", "ls")
		if !strings.Contains(out, id+" ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("crash after %s: task %s still listed:\n%s", step, id, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, _ = e.ctrResult(context.Background(), "container", "rm", id)
}

// TestPoolMonitorKilled: kill -9 of the monitor standing for a pool task's
// init, while an exec runs in the task, ends the exec as a failure with
// the task (as the container's init dying would: its pid namespace ends),
// for a container in a warm pool's sandbox and a process in an image
// pool's. Before, the warm pool's exec ran on inside the sandbox and
// exited 0.
func TestPoolMonitorKilled(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	ctx := namespaces.WithNamespace(context.Background(), testNS)
	cl := mustClient(t)
	for _, tc := range []struct {
		name  string
		start func(*testing.T, int) *harness.Pool
	}{{"warm", startPool}, {"image", startImagePool}} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.start(t, 1)
			id := "monkill-" + tc.name
			runAdopted(t, p, id, nil, "sleep", "600")
			cont, err := cl.LoadContainer(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			task, err := cont.Task(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			exitCh, err := task.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := cont.Spec(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ps := *spec.Process
			ps.Args = []string{"sleep", "30"}
			proc, err := task.Exec(ctx, "long", &ps, cio.NullIO)
			if err != nil {
				t.Fatal(err)
			}
			ch, err := proc.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := proc.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(int(task.Pid()), syscall.SIGKILL); err != nil {
				t.Fatalf("kill monitor %d: %v", task.Pid(), err)
			}
			select {
			case st := <-ch:
				if st.ExitCode() == 0 {
					t.Errorf("the exec exited 0 after its task's monitor was killed; want a failure")
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("the exec still runs 20 s after its task's monitor was killed")
			}
			select {
			case st := <-exitCh:
				if st.ExitCode() != 137 {
					t.Errorf("task exit %d, want 137 (its monitor's SIGKILL)", st.ExitCode())
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("no exit of the task 20 s after its monitor was killed")
			}
			if _, err := proc.Delete(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestKillGoferBeforeStart: kill -9 of a task's gofer between its create
// and its start fails the start, and the task's exit is reported
// (containerd's Wait returns) without anything more than the kill and
// delete a client does after a failed start; a task never started after
// its gofer's death (a client that gives up on it: kill, then delete)
// has its exit reported too.
func TestKillGoferBeforeStart(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	ctx := namespaces.WithNamespace(context.Background(), testNS)
	cl := mustClient(t)
	img, err := cl.GetImage(ctx, busybox)
	if err != nil {
		t.Fatal(err)
	}
	for _, start := range []bool{true, false} {
		id := fmt.Sprintf("gofer-kill-%v", start)
		cleanupTask(t, id)
		cont, err := cl.NewContainer(ctx, id, ctrd.WithNewSnapshot(id, img),
			ctrd.WithNewSpec(coci.WithImageConfig(img), coci.WithProcessArgs("sleep", "600")), ctrd.WithRuntime(runtime, nil))
		if err != nil {
			t.Fatal(err)
		}
		task, err := cont.NewTask(ctx, cio.NullIO)
		if err != nil {
			t.Fatal(err)
		}
		exitCh, err := task.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gofer, err := harness.Gofer(shimPid(t, id))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(gofer, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if start {
			serr := task.Start(ctx)
			t.Logf("%s: start after the gofer's death: %v", id, serr)
			if serr == nil {
				t.Errorf("%s: the task started without its gofer", id)
			}
		}
		if err := task.Kill(ctx, syscall.SIGKILL); err != nil {
			t.Logf("%s: kill: %v", id, err)
		}
		select {
		case st := <-exitCh:
			t.Logf("%s: exit %d %v", id, st.ExitCode(), st.Error())
		case <-time.After(20 * time.Second):
			t.Errorf("%s: lost exit: none 20 s after the kill", id)
		}
		if _, err := task.Delete(ctx, ctrd.WithProcessKill); err != nil {
			t.Errorf("%s: delete: %v", id, err)
		}
		if err := cont.Delete(ctx, ctrd.WithSnapshotCleanup); err != nil {
			t.Error(err)
		}
	}
}

// TestDeleteDuringCreate: a client that goes away while its task is being
// created (its context cancelled mid-create) makes containerd delete the
// task and shut its shim down while the shim's Create runs on (ttrpc does
// not cancel it). The shim's Delete waits for the create, which, once
// done, takes its sandbox down; then the shim exits and nothing is left.
// Before, the Delete found nothing yet, and the shim could stay for good
// holding a container whose bundle containerd had removed. The create is
// held by the test-only SlowCreateAnnotation so that the cancel lands in
// it. With stdio FIFOs whose reader went with the client (a crashed
// program's), the create's open of them for writing blocked for 30 s —
// past containerd's 5 s wait for the Delete, after which nothing shut the
// shim down: shim and sandbox stayed for good.
func TestDeleteDuringCreate(t *testing.T) {
	cl, ctx, img := clientEnv(t)
	checkNoLeaks(t)
	for _, c := range []struct {
		name    string
		creator cio.Creator
	}{
		{"null-io", cio.NullIO},
		{"fifos-unread", unreadFIFOs(t)},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := "create-abandoned-" + c.name
			cont := newContainer(t, cl, ctx, img, id, coci.WithProcessArgs("sleep", "600"),
				coci.WithAnnotations(map[string]string{shim.SlowCreateAnnotation: "3s"}))
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			time.AfterFunc(time.Second, cancel)
			t0 := time.Now()
			if task, err := cont.NewTask(cctx, c.creator); err == nil {
				_, _ = task.Delete(ctx, ctrd.WithProcessKill)
				t.Fatal("NewTask succeeded although its context was cancelled during the held create")
			}
			if d := time.Since(t0); d > 2500*time.Millisecond {
				t.Fatalf("NewTask failed only after %s: the cancel did not land in the held create", d)
			}
			for _, want := range []string{"create of " + id + " held for", "delete of " + id + " waits for its create", id + " was deleted while it was being created"} {
				if !waitLogged(want, 15*time.Second) {
					t.Fatalf("the shim never logged %q", want)
				}
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				pid, err := harness.ShimPid(e.Socket(), id)
				if err != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("shim %d of %s still runs after its task was deleted mid-create", pid, id)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if out, _, _ := e.ctr(context.Background(), "task", "ls"); strings.Contains(out, id+" ") {
				t.Errorf("task %s still listed:\n%s", id, out)
			}
		})
	}
}

// TestShimIdleExit: a shim left with no task and no Shutdown from
// containerd — what containerd leaves when the client of a task's delete
// goes away mid-delete (it removes the task, then stops before shutting
// the shim down), here made by deleting the container through the shim's
// own socket — exits by itself (after GVX_TEST_SHIM_IDLE_EXIT, 5 s in
// these tests; 30 s otherwise). Before, it stayed for good.
func TestShimIdleExit(t *testing.T) {
	cl, ctx, img := clientEnv(t)
	checkNoLeaks(t)
	id := "shim-idle-exit"
	cont := newContainer(t, cl, ctx, img, id, coci.WithProcessArgs("sleep", "600"))
	tk, exit := startTask(t, ctx, cont, cio.NullIO)
	pid, err := harness.ShimPid(e.Socket(), id)
	if err != nil {
		t.Fatal(err)
	}
	var boot struct{ Address string }
	raw, err := os.ReadFile(filepath.Join(e.dir, "state", "io.containerd.runtime.v2.task", testNS, id, "bootstrap.json"))
	if err == nil {
		err = json.Unmarshal(raw, &boot)
	}
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("unix", strings.TrimPrefix(boot.Address, "unix://"))
	if err != nil {
		t.Fatal(err)
	}
	tc := ttrpc.NewClient(conn)
	shimAPI := taskapi.NewTTRPCTaskClient(tc)
	if _, err := shimAPI.Kill(ctx, &taskapi.KillRequest{ID: id, Signal: uint32(syscall.SIGKILL), All: true}); err != nil {
		t.Fatal(err)
	}
	<-exit
	if _, err := shimAPI.Delete(ctx, &taskapi.DeleteRequest{ID: id}); err != nil {
		t.Fatal(err)
	}
	tc.Close()
	deadline := time.Now().Add(25 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("shim %d with no task and no shutdown still runs", pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !waitLogged("gvx shim: no task for ", 5*time.Second) {
		t.Error("the shim did not say why it exited")
	}
	_, _ = tk.Delete(ctx)
}

// TestShimIdleExitNoCreate: a shim server containerd started for a create
// that never came exits by itself. Before, both stayed for good. The
// server is started here as containerd's start command starts it: its
// listening socket as fd 3, its bundle as cwd, where containerd holds the
// "log" FIFO open.
//   - its start went through (the client died before the create): the
//     server serves with no task, and exits after its idle delay (here 2 s)
//   - its start failed (the client died during it: containerd cancelled
//     the start, closed its log FIFO and left the server the start had
//     forked, which then waited for a reader of its log for good): the
//     server exits at once and removes its socket.
//   - the same with the bundle already removed (no log FIFO): containerd's
//     shim library failed to open the log and exited, leaving the socket
//     (a leak TestServeChaosRestart found); now it goes too.
func TestShimIdleExitNoCreate(t *testing.T) {
	if e == nil {
		t.Skip(skipReason)
	}
	checkNoLeaks(t)
	t.Run("idle", func(t *testing.T) {
		dir := t.TempDir()
		logR, exited := bareShim(t, dir, true)
		defer logR.Close()
		conn, err := net.Dial("unix", filepath.Join(dir, "s"))
		if err != nil {
			t.Fatal(err)
		}
		tc := ttrpc.NewClient(conn)
		_, serr := taskapi.NewTTRPCTaskClient(tc).State(context.Background(), &taskapi.StateRequest{ID: "shim-never-created"})
		tc.Close()
		if serr == nil {
			t.Error("State of a container the shim never created answered")
		}
		select {
		case err := <-exited:
			t.Logf("the shim with no create exited (%v)", err)
		case <-time.After(20 * time.Second):
			t.Fatal("a shim whose create never came still runs 20 s after its start")
		}
		logged, _ := io.ReadAll(logR)
		if !strings.Contains(string(logged), "gvx shim: no task for 2s") {
			t.Errorf("the shim did not say why it exited; its log:\n%s", logged)
		}
	})
	for _, c := range []struct {
		name string
		log  bool
	}{{"start failed", true}, {"bundle gone", false}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			_, exited := bareShimLog(t, dir, false, c.log)
			select {
			case err := <-exited:
				t.Logf("the shim whose log nobody reads exited (%v)", err)
			case <-time.After(5 * time.Second):
				t.Fatal("a shim whose log nobody reads still runs 5 s after its start")
			}
			if _, err := os.Stat(filepath.Join(dir, "s")); !os.IsNotExist(err) {
				t.Errorf("its socket: %v, want it removed", err)
			}
		})
	}
}

// bareShim starts a shim server in bundle dir with its socket at dir/s
// and its idle exit after 2 s, with a reader of its log FIFO (returned)
// or with none; the channel reports its exit, and the test kills it if it
// has not.
func bareShim(t *testing.T, dir string, reader bool) (*os.File, <-chan error) {
	return bareShimLog(t, dir, reader, true)
}

// bareShimLog is bareShim with or without (a bundle containerd removed)
// the log FIFO.
func bareShimLog(t *testing.T, dir string, reader, log bool) (*os.File, <-chan error) {
	t.Helper()
	logPath := filepath.Join(dir, "log")
	if log {
		if err := unix.Mkfifo(logPath, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var logR *os.File
	if reader {
		var err error
		if logR, err = os.OpenFile(logPath, os.O_RDONLY|syscall.O_NONBLOCK, 0); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "s"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	sockFile, err := l.File()
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer sockFile.Close()
	cmd := exec.Command(filepath.Join(e.gvxBin, "containerd-shim-gvx-v2"), "-namespace", testNS, "-id", "shim-never-created", "-address", e.Socket())
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), shim.FaultsEnv+"=1", shim.IdleExitEnv+"=2s")
	cmd.ExtraFiles = []*os.File{sockFile}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Once it has exited (and been waited for), the kill does nothing.
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return logR, exited
}

// unreadFIFOs is a cio.Creator of stdout and stderr FIFOs that nothing
// reads: those of a client that died after making them.
func unreadFIFOs(t *testing.T) cio.Creator {
	dir := t.TempDir()
	return func(id string) (cio.IO, error) {
		cfg := cio.Config{Stdout: filepath.Join(dir, id+"-stdout"), Stderr: filepath.Join(dir, id+"-stderr")}
		for _, p := range []string{cfg.Stdout, cfg.Stderr} {
			if err := unix.Mkfifo(p, 0o600); err != nil {
				return nil, err
			}
		}
		return unreadIO{cfg}, nil
	}
}

type unreadIO struct{ cfg cio.Config }

func (u unreadIO) Config() cio.Config { return u.cfg }
func (unreadIO) Cancel()              {}
func (unreadIO) Wait()                {}
func (unreadIO) Close() error         { return nil }

// TestGoneBundleLog: a gvx-sentry call that starts after containerd
// removed the task's bundle (the --log it is given names a file in it)
// does not make the bundle directory again, as gVisor's log file opening
// would — a leftover TestPoolCrashMidCreate once found. It still runs,
// logging to its standard error.
func TestGoneBundleLog(t *testing.T) {
	requireEnv(t)
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	cmd := exec.Command(filepath.Join(e.Bins.GVX, api.SentryBinary), "--root", filepath.Join(dir, "root"),
		"--log", filepath.Join(bundle, "log.json"), "--log-format", "json", "state", "gone")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "does not exist") {
		t.Errorf("state of a container that does not exist: %v, %q; want its error on stderr", err, out)
	}
	if _, err := os.Stat(bundle); !os.IsNotExist(err) {
		t.Errorf("the removed bundle %s was made again: %v", bundle, err)
	}
}

// startUnread runs start, of what (a task or exec whose stdio FIFOs
// nobody reads), failing the test if it does not return within 20 s, and
// logs how long it took.
func startUnread(t *testing.T, ctx context.Context, what string, start func(context.Context) error) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := start(sctx); err != nil {
		t.Fatalf("start %s whose FIFOs nobody reads: %v (after %s)", what, err, time.Since(t0))
	}
	t.Logf("%s started after %s", what, time.Since(t0))
}

// TestExecStartUnread: the start of an exec whose stdio FIFOs nobody
// reads any more (its client died between the exec's create and its
// start) returns, and a SIGKILL of the task then ends the task at once.
// containerd's runc task service opens an exec's FIFOs for writing at its
// start, waiting up to 30 s for a reader, and publishes the init's exit
// only once every started exec has: before, the start failed after 30 s
// and the killed task's exit waited as long (a gvx serve SIGKILLed during
// a command made a restarted service's kill of that sandbox take 30 s).
func TestExecStartUnread(t *testing.T) {
	cl, ctx, img := clientEnv(t)
	checkNoLeaks(t)
	id := "exec-unread"
	cont := newContainer(t, cl, ctx, img, id, coci.WithProcessArgs("sleep", "600"))
	task, exit := startTask(t, ctx, cont, cio.NullIO)
	spec, err := cont.Spec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pspec := *spec.Process
	pspec.Args = []string{"sh", "-c", "while true; do echo tick; sleep 0.1; done"}
	proc, err := task.Exec(ctx, "unread", &pspec, unreadFIFOs(t))
	if err != nil {
		t.Fatal(err)
	}
	startUnread(t, ctx, "the exec", proc.Start)
	t1 := time.Now()
	if err := task.Kill(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exit:
		t.Logf("the task exited %s after its SIGKILL", time.Since(t1))
	case <-time.After(10 * time.Second):
		t.Errorf("the task did not exit within 10 s of its SIGKILL")
	}
	if _, err := proc.Delete(ctx, ctrd.WithProcessKill); err != nil {
		t.Errorf("delete the exec: %v", err)
	}
	if _, err := task.Delete(ctx, ctrd.WithProcessKill); err != nil {
		t.Errorf("delete the task: %v", err)
	}
}

// TestRestoreStartUnread: the start of a task restored from a containerd
// checkpoint whose stdio FIFOs nobody reads any more (its client died
// after the create) returns, and the task can then be killed and
// deleted. containerd's runc task service opens those FIFOs for writing
// at the start of such a task, holding the task's lock: before, the start
// never returned, and every State, Kill and Delete of the task waited
// behind it (a gvx serve restarted after a crash could not remove a pool
// sandbox's restore).
func TestRestoreStartUnread(t *testing.T) {
	cl, ctx, img := clientEnv(t)
	checkNoLeaks(t)
	id := "restore-unread"
	cont := newContainer(t, cl, ctx, img, id, coci.WithProcessArgs("sh", "-c", "while true; do echo tick; sleep 0.1; done"))
	task, _ := startTask(t, ctx, cont, cio.NullIO)
	ck, err := task.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.ImageService().Delete(ctx, ck.Name()) })
	if _, err := task.Delete(ctx, ctrd.WithProcessKill); err != nil {
		t.Fatal(err)
	}
	restored, err := cont.NewTask(ctx, unreadFIFOs(t), ctrd.WithTaskCheckpoint(ck))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := restored.Delete(ctx, ctrd.WithProcessKill); err != nil {
			t.Errorf("delete the restored task: %v", err)
		}
	}()
	startUnread(t, ctx, "the restored task", restored.Start)
	stctx, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	if st, err := restored.Status(stctx); err != nil || st.Status != ctrd.Running {
		t.Errorf("the restored task: %v %v, want running", st.Status, err)
	}
}
